# bash completion for driftgate: `driftgate completion bash > /etc/bash_completion.d/driftgate`.
# The binary answers (`driftgate __complete ARGS... WORD`, as kubectl answers its own): a line
# per completion (value, a tab, a description), then `:DIRECTIVE` (2: no space after it, 4: no
# file names), so namespaces, records and object names come from the cluster.
_driftgate() {
    local line=${COMP_LINE:0:COMP_POINT}
    local -a words
    read -r -a words <<<"$line"
    local cur=""
    if [[ $line != *[[:space:]] ]]; then
        cur=${words[${#words[@]}-1]}
        unset 'words[${#words[@]}-1]'
    fi
    local out
    out=$("${words[0]}" __complete "${words[@]:1}" "$cur" 2>/dev/null) || return
    local directive=${out##*:}
    local -a values=()
    local entry
    while IFS= read -r entry; do
        [[ $entry == :* || -z $entry ]] && continue
        values+=("${entry%%$'\t'*}")
    done <<<"$out"
    # bash splits the word being completed at `=` and `:` (COMP_WORDBREAKS): it replaces only
    # what follows the last of them, so the values drop what comes before.
    local prefix=""
    if [[ $cur == *[=:]* ]]; then
        prefix=${cur%"${cur##*[=:]}"}
    fi
    COMPREPLY=()
    for entry in "${values[@]}"; do
        COMPREPLY+=("${entry#"$prefix"}")
    done
    if ((directive & 2)); then
        compopt -o nospace 2>/dev/null
    fi
    if ((${#COMPREPLY[@]} == 0 && !(directive & 4))); then
        compopt -o default 2>/dev/null
    fi
    return 0
}
complete -F _driftgate driftgate
