#!/usr/bin/env bash
# run.sh -- the load test: lock strategies side by side, every run audited, then plotted.
#
#   loadtest/run.sh [--bin build/inventoryd] [--quick] [--only LIST] [--update-docs] ...
#
# A wrapper, kept for the command line: loadtest/drive.py starts and stops redis-server,
# inventoryd and wrk, and loadtest/analyze.py audits, tabulates and plots (--help lists
# the options; both files open with their contract). Debian's python3 is used when
# present, so the standard library it ships is the only one the load test relies on.
# Exit status: 0 every audit passed, 1 an audit failed, 2 setup error, 130 interrupted.

dir=$(cd "$(dirname "$0")" && pwd) || exit 2
python=/usr/bin/python3
if [ ! -x "$python" ]; then
    python=$(command -v python3) || {
        echo "run.sh: python3 not found (apt-get install python3)" >&2
        exit 2
    }
fi
exec "$python" "$dir/drive.py" "$@"
