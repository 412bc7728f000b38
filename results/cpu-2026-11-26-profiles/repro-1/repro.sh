#!/usr/bin/env bash
# Measures result 1 of cpu-profiles @ r1 again, here.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
. .venv/bin/activate
# SPEEDWATCH_PACKAGE: where speedwatch comes from when not from your index (a
# checkout: SPEEDWATCH_PACKAGE='/path/to/speedwatch[bench]')
pip install "${SPEEDWATCH_PACKAGE:-speedwatch[bench]}"
speedwatch bench --spec spec.json --json reproduced.json
