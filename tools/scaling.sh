#!/usr/bin/env bash
# The scaling sweep in the network lab: tools/scaling.py (see its --help and
# docs/SCALING.md). Needs root and a lab that is up:
#   tools/netlab up 4 --rate=1gbit && tools/scaling.sh --quick && tools/netlab down
exec /usr/bin/python3 "$(dirname "$0")/scaling.py" "$@"
