#!/usr/bin/env bash
# How issue 87's arms run (README.md here): each in a git worktree of one commit, outside the work tree, with its own
# .venv, Snakemake in the background (its own session, so its own share of the CPU; nice 10), and every stretch's start
# and end in the tree's stretches.txt with the CPU it ran on. A stopped or killed arm resumes with `start` again.
#
#   arms.sh start P SHA   arm P (and C, the variant text_long in the same tree): config/mini.yaml +
#                         config/experiments/paper_rules.yaml from text_s1 (its text_s1-text_s4 are mini's default:
#                         the shared parents), target `all`, in $RUNS/paper-rules-SHA
#   arms.sh start E SHA   arm E: + config/experiments/noise_every_prompt.yaml, reusing arm P's text_s1-text_s5
#                         ($ARM_P, default the newest $RUNS/paper-rules-*); one Snakemake per seed (`--nolock`: their
#                         files are disjoint), each started once arm P's text_s5 of that seed has ended
#   arms.sh stop          SIGTERM to every arm's Snakemake group: each training job ends its step, saves, exits
#
# RUNS defaults to ~/vlbind-runs. The arms train on the CPU they started on (`grep -o avx512_bf16 /proc/cpuinfo`):
# bf16 and fp32 trajectories differ, so a tree is resumed on its kind only (`start` refuses another kind).
set -euo pipefail
RUNS=${RUNS:-$HOME/vlbind-runs}
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
SEEDS=(0 1 2)

cpu_kind() { echo "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 '^cpu family' \
    /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs), \
$(grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo bf16 || echo fp32)"; }

tree_for() {  # ARM SHA -> the tree, created (worktree, .venv) if missing
    local dir=$RUNS/$([[ $1 == P ]] && echo paper-rules || echo noise-every)-$2
    if [[ ! -d $dir ]]; then
        mkdir -p "$RUNS"
        git -C "$REPO" worktree add -q --detach "$dir" "$2"
        (cd "$dir" && ./run.sh install > install.log 2>&1)
        echo "tree: commit $2, created $(date -u +%FT%TZ) on $(cpu_kind)" > "$dir/stretches.txt"
    fi
    local kind; kind=$(grep -m1 '^tree:' "$dir/stretches.txt" | sed 's/.* on //')
    if [[ $kind != "$(cpu_kind)" ]]; then
        echo "arms.sh: $dir was started on '$kind', this CPU is '$(cpu_kind)': its trajectories would differ;" \
            "start a tree of its own here" >&2
        exit 1
    fi
    echo "$dir"
}

launch() {  # DIR LOGNAME SNAKEMAKE-ARGS...: Snakemake in its own session, niced, logged; one stretch line
    local dir=$1 name=$2; shift 2
    (cd "$dir" && .venv/bin/snakemake --unlock "$@" >/dev/null 2>&1 || true)
    (cd "$dir" && setsid nice -n 10 .venv/bin/snakemake --rerun-incomplete "$@" >> "$dir/$name.log" 2>&1 &)
    echo "stretch: $name started $(date -u +%FT%TZ) on $(cpu_kind)" >> "$dir/stretches.txt"
}

start_p() {
    local dir; dir=$(tree_for P "$1")
    launch "$dir" snakemake --cores 2 --configfile config/mini.yaml config/experiments/paper_rules.yaml
}

start_e() {
    local dir armp; dir=$(tree_for E "$1")
    armp=${ARM_P:-$(ls -d "$RUNS"/paper-rules-* | tail -1)}
    printf 'reuse: {tree: %s/results, stages: [text_s1, text_s2, text_s3, text_s4, text_s5]}\n' "$armp" \
        > "$dir/reuse.yaml"
    # the watcher: a seed starts once arm P's text_s5 has written its meta.json (the last of its three files)
    (cd "$dir" && setsid nohup bash -c 'echo $$ > watch.pid
        for s in '"${SEEDS[*]}"'; do started[$s]=0; done
        while :; do
            left=0
            for s in '"${SEEDS[*]}"'; do
                [[ ${started[$s]} == 1 ]] && continue
                if [[ -f '"$armp"'/results/models/seed$s/text_s5/meta.json ]]; then
                    started[$s]=1
                    '"$(declare -f cpu_kind launch)"'
                    launch "$PWD" "seed$s" --cores 1 --nolock --configfile config/mini.yaml \
                        config/experiments/paper_rules.yaml config/experiments/noise_every_prompt.yaml reuse.yaml \
                        -- results/eval/noise_text/seed$s.parquet \
                        results/interp/interchange/noise_text/seed$s.parquet
                else left=1; fi
            done
            [[ $left == 0 ]] && exit 0
            sleep 300
        done' >> watch.log 2>&1 &)
}

stop_all() {
    for w in "$RUNS"/*/watch.pid; do [[ -f $w ]] && kill "$(cat "$w")" 2>/dev/null || true; done
    for pid in $(pgrep -f "snakemake --rerun-incomplete" || true); do
        local pg; pg=$(ps -o pgid= -p "$pid" | xargs) || continue
        local dir; dir=$(readlink "/proc/$pid/cwd")
        kill -TERM -- "-$pg" 2>/dev/null || true
        echo "stretch: ended $(date -u +%FT%TZ) (arms.sh stop, SIGTERM to group $pg)" >> "$dir/stretches.txt"
    done
}

case ${1:-} in
    start) case ${2:-} in P) start_p "$3" ;; E) start_e "$3" ;; *) echo "usage: arms.sh start P|E SHA" >&2; exit 2 ;; esac ;;
    stop) stop_all ;;
    *) echo "usage: arms.sh start P|E SHA | stop" >&2; exit 2 ;;
esac
