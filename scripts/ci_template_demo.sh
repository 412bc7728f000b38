#!/usr/bin/env bash
# Run the GitHub action's benchmark step (action.yml, with the inputs of the example workflow
# docs/ci/github-actions.yml) twice, as two commits, against a local `speedwatch serve` (SQLite, embedded executor), then
# `speedwatch report` on the two; the Markdown summaries land in the work directory.
# Usage: bash scripts/ci_template_demo.sh [WORKDIR]   (default: a new temporary directory)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="$repo/.venv/bin"
work="${1:-$(mktemp -d)}"
mkdir -p "$work" && cd "$work"
export SPEEDWATCH_DATABASE_URL="sqlite:///$work/sw.db" SPEEDWATCH_EXECUTOR=local \
       SPEEDWATCH_VENV_CACHE_DIR="$work/venvs"
"$bin/speedwatch" migrate
TOKEN=$("$bin/speedwatch" token create --scope ci 2>/dev/null)
"$bin/speedwatch" serve --port 8811 > serve.log 2>&1 &
serve=$!
trap 'kill $serve' EXIT
sleep 8
export PATH="$bin:$PATH" GITHUB_REF_NAME=main
eval "$(cd "$repo" && "$bin/python" -c "
import shlex
from devkit import ci_steps
script, env = ci_steps.github_submit_step({'SPEEDWATCH_URL': 'http://127.0.0.1:8811',
                                           'SPEEDWATCH_TOKEN': '$TOKEN'})
for k, v in env.items():
    print(f'export {k}={shlex.quote(v)}')
print(f'step={shlex.quote(script)}')")"
for sha in 1111111 2222222; do
  GITHUB_SHA=$sha GITHUB_STEP_SUMMARY="$work/summary-$sha.md" GITHUB_OUTPUT="$work/output-$sha" bash -c "$step" \
    > "out-$sha.log" 2>&1 || echo "exit $?" >> "out-$sha.log"
done
"$bin/speedwatch" report --project my-project --base 1111111 --head 2222222 > report.md \
  || echo "exit $?" >> report.md
echo "summaries, logs and report in $work"
