# bash completion for sovia. The words come from the tool's own --help
# texts when completing, so they cannot drift from what it accepts
# (tests/tools/test_completion.py checks them against the help).

# The --options a help text names.
_sovia_options()
{
    "$@" --help 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u
}

# The names listed under a heading ("commands:", "modes:", "transports:").
_sovia_section()
{
    local heading=$1
    shift
    "$@" --help 2>/dev/null |
        awk -v h="$heading" '$0 == h {on = 1; next} on && !NF {exit} on {print $1}'
}

_sovia()
{
    local cur prev sovia=${COMP_WORDS[0]} words=()
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD - 1]}
    if ((COMP_CWORD == 1)); then
        words=($(_sovia_section commands: "$sovia") --help --version)
        COMPREPLY=($(compgen -W "${words[*]}" -- "$cur"))
        return
    fi
    local cmd=${COMP_WORDS[1]} i
    # After "--" (run, ksock): the program and its arguments.
    for ((i = 2; i < COMP_CWORD; i++)); do
        if [[ ${COMP_WORDS[i]} == -- ]]; then
            COMPREPLY=($(compgen -c -- "$cur"))
            return
        fi
    done
    case $cmd in
    bench)
        if ((COMP_CWORD == 2)); then
            COMPREPLY=($(compgen -W "$(_sovia_section modes: "$sovia" bench) --help" -- "$cur"))
            return
        fi
        case $prev in
        --transport)
            COMPREPLY=($(compgen -W "$(_sovia_section transports: "$sovia" bench)" -- "$cur"))
            return ;;
        --config)
            COMPREPLY=($(compgen -W "$("$sovia" bench --help 2>/dev/null |
                grep -oE 'SOVIA_[A-Z]+' | grep -v '^SOVIA_BENCH\|^SOVIA_PROVIDER' | sort -u)" -- "$cur"))
            return ;;
        esac
        words=($(_sovia_options "$sovia" bench "${COMP_WORDS[2]}")) ;;
    run | env)
        if [[ $prev == --profile ]]; then
            COMPREPLY=($(compgen -W "latency throughput balanced" -- "$cur"))
            return
        fi
        words=($(_sovia_options "$sovia" "$cmd")) ;;
    lane)
        if ((COMP_CWORD == 2)); then
            COMPREPLY=($(compgen -W "up down --help" -- "$cur"))
            return
        fi
        [[ $prev == --ns ]] && { COMPREPLY=($(compgen -W "$(ls /run/netns 2>/dev/null)" -- "$cur")); return; }
        words=($(_sovia_options "$sovia" lane)) ;;
    report)
        [[ $prev == --out ]] && { COMPREPLY=($(compgen -d -- "$cur")); return; }
        words=($(_sovia_options "$sovia" report)) ;;
    *)
        words=($(_sovia_options "$sovia" "$cmd")) ;;
    esac
    if [[ $cur == -* || ($cmd != run && $cmd != ksock) ]]; then
        COMPREPLY=($(compgen -W "$(printf '%s\n' "${words[@]}" --help | sort -u)" -- "$cur"))
    else
        COMPREPLY=($(compgen -c -- "$cur"))
    fi
}
complete -F _sovia sovia
