#!/usr/bin/env bash
# How issue 87's arms run (README.md here): each in a git worktree of one commit, outside the work tree, with its own
# .venv, Snakemake in the background (its own session, so its own share of the CPU; nice 10), and every stretch's start
# and end in the tree's stretches.txt with the CPU it ran on. A stopped or killed arm resumes with `start` again.
#
#   arms.sh start P SHA   arm P (and C, the variant text_long in the same tree): config/mini.yaml +
#                         config/experiments/paper_rules.yaml from text_s1 (its text_s1-text_s4 are mini's default:
#                         the shared parents), target `all`, in $RUNS/paper-rules-SHA
#   arms.sh start E SHA   arm E, + noise_every_prompt.yaml: noise_text's evaluation and analyses, from arm P's text_s5
#   arms.sh start C SHA   arm C, text_long (the noise control) from arm P's text_s5 and noise_text, evaluated: for a tree
#                         of arm P at a commit before 978dac7, whose text_long kept its best validation's weights
#   arms.sh start K SHA   + eval_1000.yaml: text_only's evaluation on 1,000 prompts a length, arm P's text_s5 itself
#   arms.sh start L SHA   + eval_1000.yaml + text_s5_lr.yaml: text_s5 at lr 3e-4 from arm P's text_s4, so evaluated
#                         (C, E, K, L: a tree of their own reusing arm P's stages, $ARM_P, default the newest
#                         $RUNS/paper-rules-*; one Snakemake per seed, `--nolock`: their files are disjoint; each seed
#                         starts once arm P's last reused stage of that seed has ended; SEEDS="1 2": those seeds only)
#   arms.sh stop          SIGTERM to every arm's Snakemake group: each training job ends its step, saves, exits
#   arms.sh status        each tree's running Snakemakes (their CPU share's nice) and the units still training
#   arms.sh snapshot      each tree's export (docs/results/mini/export.py: finished stages, job times, read-out tables)
#                         into docs/results/paper-rules/NAME-TAG/ and its validations so far (progress.py) into
#                         NAME-TAG-progress.csv, and every arm's tables (compare.py, page_tables.py) into tables-TAG.md;
#                         prints each unit's attempts so far. TAG names the CPU kind the trees
#                         ran on (default zen5: this stretch's machine), so that another kind's exports stand beside these
#
# CORES (arm P's jobs at once, default 2): 3 lets the seeds train side by side on 2 cores (one thread each), the same
# work, each seed's results sooner; 4 runs the encoder's pretraining beside them, before a seed's image arm waits on
# it. SESSION_NICE (default 5) lowers a reusing arm's share of the CPU against arm P's (the kernel's autogroup; a
# negative value needs root). RUNS defaults to ~/vlbind-runs. The arms train on the CPU they started on
# (`grep -o avx512_bf16 /proc/cpuinfo`): bf16 and fp32 trajectories differ, so a tree is resumed on its kind only
# (`start` refuses another kind).
#
# The arms ran at 1d1ddb2 and fd75558, whose config/experiments/ held their overlays. Since 9d1b311, paper_rules.yaml is
# mini's default and is deleted, as are arm E's noise_every_prompt.yaml and arm L's text_s5_lr.yaml (not adopted):
# `git show 1d1ddb2:config/experiments/NAME`. So `start` works on trees of those commits, not of later ones.
set -euo pipefail
RUNS=${RUNS:-$HOME/vlbind-runs}
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
read -ra SEEDS <<< "${SEEDS:-0 1 2}"
X=config/experiments

arm() {  # ARM -> TREE (directory prefix), EXPORT (its export's name), CONFIGS, REUSE (stages), TARGETS ({s}: the seed)
    REUSE="" TARGETS=""
    case $1 in
        P) TREE=paper-rules EXPORT=armP CONFIGS="$X/paper_rules.yaml" ;;
        E) TREE=noise-every EXPORT=armE CONFIGS="$X/paper_rules.yaml $X/noise_every_prompt.yaml"
           REUSE="text_s1 text_s2 text_s3 text_s4 text_s5"
           TARGETS="results/eval/noise_text/seed{s}.parquet results/interp/interchange/noise_text/seed{s}.parquet" ;;
        K) TREE=eval1000 EXPORT=eval1000 CONFIGS="$X/paper_rules.yaml $X/eval_1000.yaml"
           REUSE="text_s1 text_s2 text_s3 text_s4 text_s5" TARGETS="results/eval/text_only/seed{s}.parquet" ;;
        L) TREE=text-s5-lr EXPORT=text_s5_lr CONFIGS="$X/paper_rules.yaml $X/eval_1000.yaml $X/text_s5_lr.yaml"
           REUSE="text_s1 text_s2 text_s3 text_s4" TARGETS="results/eval/text_only/seed{s}.parquet" ;;
        C) TREE=noise-control EXPORT=armC CONFIGS="$X/paper_rules.yaml"
           REUSE="text_s1 text_s2 text_s3 text_s4 text_s5 noise_text" TARGETS="results/eval/text_long/seed{s}.parquet" ;;
        *) echo "arms.sh: no arm '$1' (P, C, E, K, L)" >&2; exit 2 ;;
    esac
}

cpu_kind() { echo "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 '^cpu family' \
    /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs), \
$(grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo bf16 || echo fp32)"; }

tree_for() {  # TREE SHA -> the tree's directory, created (worktree, .venv) if missing
    local dir=$RUNS/$1-$2
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

launch() {  # DIR LOGNAME SNAKEMAKE-ARGS...: Snakemake in its own session, niced, logged; one stretch line. The kernel
    # shares the CPU among sessions (autogroups) before their processes: with SESSION_NICE the session's share is
    # lowered (a reusing arm's, 5: arm P's stages, which every arm waits on, take ~3x its share)
    local dir=$1 name=$2; shift 2
    (cd "$dir" && .venv/bin/snakemake --unlock "$@" >/dev/null 2>&1 || true)
    (cd "$dir" && exec setsid nice -n 10 .venv/bin/snakemake --rerun-incomplete "$@") >> "$dir/$name.log" 2>&1 \
        < /dev/null &
    local pid=$! share=""
    if [[ -n ${SESSION_NICE:-} && -f /proc/$pid/autogroup ]]; then
        for _ in {1..50}; do [[ $(ps -o sid= -p "$pid" | xargs) == "$pid" ]] && break; sleep 0.1; done
        echo "$SESSION_NICE" 2>/dev/null > "/proc/$pid/autogroup" && share=", autogroup nice $SESSION_NICE"
    fi
    echo "stretch: $name started $(date -u +%FT%TZ) on $(cpu_kind)$share" >> "$dir/stretches.txt"
}

snakemakes() {  # the pids of arms' Snakemakes (an interpreter running .../snakemake --rerun-incomplete), not of a
    # watcher, whose script holds those words too
    pgrep -f '^[^ ]+ [^ ]*snakemake --rerun-incomplete' || true
}

in_tree() {  # DIR -> the pids of the arms' Snakemakes running in DIR
    local pid here; here=$(cd "$1" && pwd -P)
    for pid in $(snakemakes); do
        if [[ $(readlink "/proc/$pid/cwd") == "$here" ]]; then echo "$pid"; fi
    done
}

running() {  # DIR [WORD]: an arm's Snakemake runs in DIR (with WORD in its arguments: a seed's targets)
    local pid
    for pid in $(in_tree "$1"); do
        [[ -z ${2:-} ]] || tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$2" || continue
        return 0
    done
    return 1
}

start() {  # ARM SHA; a tree (or a seed of a reusing arm) already running is left alone: two Snakemakes on one
    # stage's files would train it twice over each other
    arm "$1"
    local dir; dir=$(tree_for "$TREE" "$2")
    if [[ -z $REUSE ]] && running "$dir"; then
        echo "arms.sh: $dir runs already (arms.sh stop first)" >&2
        exit 1
    fi
    if [[ -f $dir/watch.pid && $(awk '{print $3}' "/proc/$(cat "$dir/watch.pid")/stat" 2>/dev/null) =~ ^[RSD]$ ]]; then
        echo "arms.sh: $dir's watcher runs already (arms.sh stop first)" >&2
        exit 1
    fi
    # shellcheck disable=SC2086
    if [[ -z $REUSE ]]; then
        launch "$dir" snakemake --cores "${CORES:-2}" --configfile config/mini.yaml $CONFIGS
        return
    fi
    local armp=${ARM_P:-$(ls -d "$RUNS"/paper-rules-* | tail -1)} gate=${REUSE##* }
    printf 'reuse: {tree: %s/results, stages: [%s]}\n' "$armp" "${REUSE// /, }" > "$dir/reuse.yaml"
    # the watcher: a seed starts once arm P's last reused stage of that seed has written its meta.json (the last of
    # its three files)
    (cd "$dir" && exec setsid bash -c 'echo $$ > watch.pid
        '"$(declare -f cpu_kind launch running in_tree snakemakes)"'
        declare -A started
        while :; do
            left=0
            for s in '"${SEEDS[*]}"'; do
                [[ -n ${started[$s]:-} ]] && continue
                if running "$PWD" "/seed$s\\."; then  # started by an earlier watcher, still running
                    started[$s]=1
                elif [[ -f '"$armp"'/results/models/seed$s/'"$gate"'/meta.json ]]; then
                    started[$s]=1
                    targets="'"$TARGETS"'"
                    SESSION_NICE=${SESSION_NICE:-5} launch "$PWD" "seed$s" --cores 1 --nolock --configfile config/mini.yaml '"$CONFIGS"' reuse.yaml \
                        -- ${targets//\{s\}/$s}
                else left=1; fi
            done
            [[ $left == 0 ]] && exit 0
            sleep 300
        done') >> "$dir/watch.log" 2>&1 < /dev/null &
}

stop_all() {
    # a watcher is a session of its own (setsid): its group is its pid
    for w in "$RUNS"/*/watch.pid; do [[ -f $w ]] && kill -- "-$(cat "$w")" 2>/dev/null || true; done
    for pid in $(snakemakes); do
        local pg; pg=$(ps -o pgid= -p "$pid" | xargs) || continue
        local dir; dir=$(readlink "/proc/$pid/cwd") || continue
        [[ $dir == "$RUNS"/* ]] || continue  # another RUNS' arm, or a Snakemake that is not an arm
        kill -TERM -- "-$pg" 2>/dev/null || true
        echo "stretch: ended $(date -u +%FT%TZ) (arms.sh stop, SIGTERM to group $pg)" >> "$dir/stretches.txt"
    done
}

status() {  # each tree's running Snakemakes (session, its autogroup's nice) and its units still training
    local dir pid
    for dir in "$RUNS"/*/; do
        dir=${dir%/}
        [[ -d $dir/results ]] || continue
        echo "== $dir"
        for pid in $(in_tree "$dir"); do
            echo "running: Snakemake $pid, $(cat "/proc/$pid/autogroup" 2>/dev/null || echo "no autogroup")"
        done
        "$REPO/.venv/bin/python" "$REPO/docs/results/paper-rules/progress.py" "$dir/results" /dev/null 2>&1 \
            | grep -v "(finished)" || true
    done
}

snapshot() {
    local here=$REPO/docs/results/paper-rules py=$REPO/.venv/bin/python tag=${TAG:-zen5}
    for a in P C E K L; do
        arm "$a"
        for dir in "$RUNS/$TREE"-*; do
            [[ -d $dir/results ]] || continue
            echo "== $EXPORT-$tag: $dir ($(date -u +%FT%TZ))"
            "$py" "$REPO/docs/results/mini/export.py" --results "$dir/results" --out "$here/$EXPORT-$tag"
            "$py" "$here/progress.py" "$dir/results" "$here/$EXPORT-$tag-progress.csv" || true  # none yet
            cp "$dir/stretches.txt" "$here/$EXPORT-$tag/stretches.txt"
        done
    done
    tables "$here" "$tag" > "$here/tables-$tag.md.part" && mv "$here/tables-$tag.md.part" "$here/tables-$tag.md"
}

tables() {  # HERE TAG -> Markdown: compare.py's per-seed tables of every arm's export, then each export's training,
    # capped and wall tables (page_tables.py): the numbers the page quotes, with the commands that printed them
    local here=$1 tag=$2 py=$REPO/.venv/bin/python rel=docs/results/paper-rules a names=()
    for a in P C E K L; do arm "$a"; [[ -d $here/$EXPORT-$tag ]] && names+=("$a=$rel/$EXPORT-$tag"); done
    echo "# The $tag exports' tables ($(date -u +%FT%TZ), \`arms.sh snapshot\` at $(git -C "$REPO" rev-parse --short HEAD))"
    echo
    echo "\`python $rel/compare.py complete=docs/results/mini/693ee8b ${names[*]} --base P\`"
    echo
    (cd "$REPO" && "$py" "$rel/compare.py" complete=docs/results/mini/693ee8b "${names[@]}" --base P)
    for a in "${names[@]}"; do
        echo
        echo "## ${a%%=*}: \`python docs/results/mini/page_tables.py --dir ${a#*=} training capped wall\`"
        (cd "$REPO" && "$py" docs/results/mini/page_tables.py --dir "${a#*=}" training capped wall)
    done
}

case ${1:-} in
    start) start "${2:-}" "${3:?arms.sh start ARM SHA}" ;;
    stop) stop_all ;;
    status) status ;;
    snapshot) snapshot ;;
    *) echo "usage: arms.sh start P|C|E|K|L SHA | stop | status | snapshot" >&2; exit 2 ;;
esac
