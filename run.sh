#!/usr/bin/env bash
# Quickstart entry point: creates .venv/ with everything vlbind needs (if missing), then
#   ./run.sh mini [snakemake args]   the whole DAG at the CPU `mini` scale -> results/figures/*.pdf, one job per
#                                    core of this machine (`--cores N` among the args: N instead)
#   ./run.sh test [pytest args]      the test suite
#   ./run.sh install                 only the install step
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
stamp=.venv/.vlbind-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    echo "run.sh: installing into .venv/ (torch and friends; a few minutes the first time)" >&2
    [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[test]'
    touch "$stamp"
fi

cmd=${1:-}
shift || true
case "$cmd" in
    # the machine's cores first, so that a --cores among the args wins (snakemake keeps the last)
    mini) exec .venv/bin/snakemake --cores "$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)" "$@" \
        --configfile config/mini.yaml ;;
    test) exec .venv/bin/python -m pytest "$@" ;;
    install) ;;
    *) echo "usage: ./run.sh mini|test|install [args]" >&2; exit 2 ;;
esac
