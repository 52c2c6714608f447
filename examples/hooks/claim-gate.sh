#!/usr/bin/env bash
# claim-gate.sh: an agent stop hook that refuses to let an assistant finish while it asserts a root cause
# that no smoke has confirmed. See docs/agent-hook.md.
#
# Claude Code (Stop hook): the hook gets JSON on stdin with `transcript_path` and `stop_hook_active`.
# Other agents: pass the final message on stdin as plain text instead (anything that is not JSON is taken as
# the message itself).
#
# The assistant states a cause with a line like
#     Root cause: gpu_oom
#     Root cause: gpu_oom (run: /runs/exp42)
# The run directory comes from "(run: DIR)" on that line, else $MLDEBUG_RUN_DIR.
#
# Exit 0: no claim, or the claim is smoke-confirmed. Exit 2 with the gate's explanation on stderr: the claim
# is not confirmed (Claude Code feeds stderr back to the assistant and keeps it working).
#
# Settings (environment):
#   MLDEBUG_BIN           the CLI to call (default: mldebug-rules)
#   MLDEBUG_RUN_DIR       run directory when the claim line does not name one
#   MLDEBUG_GATE_STRICT=0 let through a "Root cause:" line that does not name a known hypothesis id
#                         (by default it is blocked: a cause the gate cannot check is not a confirmed one)
#   MLDEBUG_GATE_ONCE=1   block at most once in a row (honours Claude Code's stop_hook_active)
set -u
bin="${MLDEBUG_BIN:-mldebug-rules}"
input="$(cat)"

# Pull the last assistant message out of the hook input, then the claim and run dir out of the message.
parsed="$(HOOK_INPUT="$input" python3 - <<'PY'
import json, os, re, sys

raw = os.environ.get("HOOK_INPUT", "")
text, active = raw, False
try:
    event = json.loads(raw)
except ValueError:
    event = None
if isinstance(event, dict):
    active = bool(event.get("stop_hook_active"))
    text = ""
    path = event.get("transcript_path")
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                msg = entry.get("message") or {}
                if entry.get("type") != "assistant" and msg.get("role") != "assistant":
                    continue
                content = msg.get("content")
                if isinstance(content, str):
                    text = content
                elif isinstance(content, list):
                    parts = [c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"]
                    if any(parts):
                        text = "\n".join(parts)
claim = re.findall(
    r"(?im)^[\s>*_-]*root cause[*_]*\s*:[\s*_`]*([A-Za-z0-9_.-]+)[*_`]*(?:\s*\(run:\s*([^)]+)\))?",
    text,
)
if claim:
    cid, run = claim[-1]
    print(f"{int(active)}\t{cid}\t{run.strip()}")
else:
    print(f"{int(active)}\t\t")
PY
)"
IFS=$'\t' read -r active claim run_dir <<<"$parsed"
[ -z "${claim:-}" ] && exit 0
run_dir="${run_dir:-${MLDEBUG_RUN_DIR:-}}"
if [ "${MLDEBUG_GATE_ONCE:-0}" = 1 ] && [ "${active:-0}" = 1 ]; then
  exit 0
fi
if [ -z "$run_dir" ]; then
  echo "claim-gate: you claimed root cause '$claim' but no run directory is known: add '(run: DIR)' to the claim line or set MLDEBUG_RUN_DIR" >&2
  exit 2
fi

# Never --trust-recorded: a result typed in with `smoke record` is the assistant's word, not a smoke's.
out="$("$bin" gate "$run_dir" --claim "$claim" 2>&1)"
rc=$?
case "$rc" in
  0) exit 0 ;;
  1)
    {
      echo "You stated 'Root cause: $claim', but mldebug-rules has no smoke confirming it."
      echo "State it as a hypothesis, or run the smoke pair below (the baseline, then the one-variable change) and let its result decide."
      echo "$out"
    } >&2
    exit 2 ;;
  2)
    [ "${MLDEBUG_GATE_STRICT:-1}" = 0 ] && exit 0
    case "$out" in
      *"unknown hypothesis id"*)
        echo "You stated 'Root cause: $claim', which is not a hypothesis id the gate can check. Name it by its id from \`$bin diagnose\` (after \`$bin gate RUN_DIR --claim ID\` passes), or call it a hypothesis: $out" >&2 ;;
      *)
        echo "claim-gate: cannot check 'Root cause: $claim' against $run_dir: $out" >&2 ;;
    esac
    exit 2 ;;
  *)
    echo "claim-gate: $bin gate failed (exit $rc): $out" >&2
    exit 0 ;;
esac
