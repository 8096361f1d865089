#!/bin/sh
# A stand-in for the job's Python that fails on one emulated node (hostname ending in
# -n$FAIL_NODE, default 1) the way a broken node would, and runs Python everywhere else.
case "$(hostname)" in
*-n"${FAIL_NODE:-1}")
    echo "python_failing_on_node: no usable Python on $(hostname)" >&2
    exit 7
    ;;
esac
exec "$(dirname "$0")/../../.venv/bin/python" "$@"
