# fish completion for driftgate: `driftgate completion fish > ~/.config/fish/completions/driftgate.fish`.
# The binary answers (`driftgate __complete ARGS... WORD`, as kubectl answers its own): a line
# per completion (value, a tab, a description), then `:DIRECTIVE` (2: no space after it, 4: no
# file names), so namespaces, records and object names come from the cluster.
function __driftgate_answer
    set -l args (commandline -opc)
    set -e args[1]
    driftgate __complete $args (commandline -ct) 2>/dev/null
end

function __driftgate_values
    set -l out (__driftgate_answer)
    set -e out[-1]
    printf '%s\n' $out
end

# File names only where driftgate offers nothing and does not say "no files" (directive 4).
function __driftgate_wants_files
    set -l out (__driftgate_answer)
    set -l directive (string replace -r '^:' '' -- $out[-1])
    test (count $out) -eq 1; and test (math "$directive % 8 - $directive % 4") -eq 0
end

complete -c driftgate -e
complete -c driftgate -f -n 'not __driftgate_wants_files' -a '(__driftgate_values)'
complete -c driftgate -F -n __driftgate_wants_files
