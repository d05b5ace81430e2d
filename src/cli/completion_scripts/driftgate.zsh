#compdef driftgate
# zsh completion for driftgate: `driftgate completion zsh > "${fpath[1]}/_driftgate"`, then
# compinit. The binary answers (`driftgate __complete ARGS... WORD`, as kubectl answers its own):
# a line per completion (value, a tab, a description), then `:DIRECTIVE` (2: no space after it,
# 4: no file names), so namespaces, records and object names come from the cluster.
_driftgate() {
    local out directive entry
    local -a lines values
    out=$("${words[1]}" __complete "${(@)words[2,CURRENT-1]}" "${words[CURRENT]}" 2>/dev/null) || return 1
    lines=("${(@f)out}")
    directive=${${lines[-1]}#:}
    for entry in "${(@)lines[1,-2]}"; do
        [[ -z $entry ]] && continue
        # _describe reads `value:description`; a colon in the value is escaped.
        values+=("${${entry%%$'\t'*}//:/\\:}:${entry#*$'\t'}")
    done
    if ((${#values})); then
        if ((directive & 2)); then
            _describe -t values driftgate values -S ''
        else
            _describe -t values driftgate values
        fi
    elif ((!(directive & 4))); then
        _files
    fi
}
# Loaded by compinit from fpath, the file is the function's body; sourced, it registers it.
if [[ $funcstack[1] == _driftgate ]]; then
    _driftgate "$@"
else
    compdef _driftgate driftgate
fi
