#!/usr/bin/env bash
# The scaling sweep in the network lab: tools/lab/scaling.py (see its --help and
# docs/SCALING.md). Needs root and a lab that is up:
#   tools/lab/netlab up 4 --rate=1gbit && tools/lab/scaling.sh --quick && tools/lab/netlab down
exec /usr/bin/python3 "$(dirname "$0")/scaling.py" "$@"
