"""The durable-rules backend. Every call into durable-rules lives in this module.

Design answers to what was measured about durable-rules 2.0.28 (see docs/engine.md):
- one ``Host`` per process, with its background timer threads disabled (they race the C engine);
- rulesets registered once, named by content;
- each diagnosis runs on its own session id, deleted afterwards, so nothing leaks between runs;
- ``set_rulesets`` mutates its argument, so it gets a deep copy;
- exceptions inside actions never reach the caller: the action records them and we raise after the run;
- every call happens on one thread (upstream issue #291), serialised by a lock.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

Fact = dict[str, Any]
Bindings = dict[str, Fact]
Action = Callable[[str, Bindings], list[Fact]]


class EngineError(RuntimeError):
    pass


def available() -> tuple[bool, str]:
    try:
        import durable.engine  # noqa: F401
    except Exception as e:  # ImportError, or the undefined-symbol OSError on Python 3.13
        return False, f"{type(e).__name__}: {e}"
    return True, ""


def version() -> str:
    # The dist-info folder beside the package names the version; importlib.metadata would cost more than the
    # rest of a small diagnosis' engine pass, so it is only the fallback.
    try:
        import durable

        for entry in os.scandir(os.path.dirname(os.path.dirname(durable.__file__))):
            name = entry.name
            if name.startswith("durable_rules-") and name.endswith(".dist-info"):
                return name[len("durable_rules-") : -len(".dist-info")]
    except Exception:
        pass
    try:
        from importlib.metadata import version as v

        return v("durable_rules")
    except Exception:
        return "unknown"


_LOCK = threading.Lock()
_HOST: Any = None
_REGISTERED: set[str] = set()
_CURRENT: dict[str, Any] = {}
_PENDING: list[tuple[str, list[dict[str, Any]]]] = []


def _cleanup(host: Any) -> None:
    while _PENDING:
        name, facts = _PENDING.pop()
        for f in reversed(facts):
            try:
                host.retract_fact(name, f)
            except Exception:
                pass  # a fact no rule kept was never stored


def _host() -> Any:
    global _HOST
    if _HOST is None:
        import durable.engine as de

        class _Host(de.Host):  # type: ignore[misc, name-defined]
            def _run(self) -> None:
                # The stock Host starts timer threads that call into the C engine every 0.2 s, racing our
                # calls (measured: segfaults). We use neither timers nor queued events: actions run
                # synchronously inside assert_fact, so every call stays on the caller's thread.
                return

            def get_action(self, name: str) -> Callable[[Any], None]:
                def run(c: Any) -> None:
                    _run_action(name, c)

                return run

        _HOST = _Host()
    return _HOST


def _run_action(name: str, c: Any) -> None:
    state = _CURRENT
    if state.get("error"):
        return
    try:
        bindings = {}
        for pname, content in (c._m or {}).items():
            d = dict(content)
            d.pop("sid", None)
            bindings[pname] = d
        for new in state["action"](name, bindings):
            if new["key"] in state["seen"]:
                continue
            state["seen"].add(new["key"])
            fact = dict(new)
            fact["sid"] = state["sid"]
            state["asserted"].append(fact)
            c.assert_fact(fact)
    except Exception as e:  # surfaced after the run, naming the rule
        state["error"] = f"rule {name}: {type(e).__name__}: {e}"


class DurableBackend:
    name = "durable-rules"

    def __init__(self, ruleset_name: str, ruleset: Mapping[str, Any], action: Action):
        self._name = ruleset_name
        self._action = action
        with _LOCK:
            host = _host()
            if ruleset_name not in _REGISTERED:
                if ruleset:
                    # set_rulesets mutates what it is given: hand it a copy (a JSON round trip is several
                    # times faster than deepcopy for this JSON-shaped artefact).
                    host.set_rulesets({ruleset_name: json.loads(json.dumps(ruleset))})
                _REGISTERED.add(ruleset_name)
        self._empty = not ruleset

    def run(self, facts: list[Fact]) -> None:
        if self._empty:
            return
        import durable.engine as de

        with _LOCK:
            host = _host()
            sid = "diag"  # one session, emptied before each diagnosis (_cleanup): a sid per run leaked its state
            _CURRENT.clear()
            _cleanup(host)
            _CURRENT.update(action=self._action, sid=sid, seen=set(), error=None, asserted=[])
            started = False
            state: Any = None
            try:
                batch = []
                for fact in facts:
                    if fact["key"] in _CURRENT["seen"]:
                        continue
                    _CURRENT["seen"].add(fact["key"])
                    f = dict(fact)
                    f["sid"] = sid
                    batch.append(f)
                _CURRENT["asserted"].extend(batch)
                if batch:
                    # One call for all input facts: keep rules (compile.py) take in every kind the rules
                    # read, and facts are distinct by key, so no fact of the batch can be refused.
                    started = True
                    try:
                        host.assert_facts(self._name, batch)
                    except (de.MessageNotHandledException, de.MessageObservedException) as e:
                        # The exception's text is the whole batch: name the class only.
                        _CURRENT["error"] = f"durable-rules refused a fact of the batch ({type(e).__name__})"
                error = _CURRENT["error"]
                try:
                    state = host.get_state(self._name, sid) if started else None
                except Exception:
                    state = None  # error 309: no fact was kept, so the session has no state
                if not error and isinstance(state, dict) and state.get("$error"):
                    error = str(state["$error"])
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
            finally:
                # delete_state segfaults when a rule holds a partial match (measured on 2.0.28), so a
                # finished session is emptied by retracting its facts instead, lazily: before the next
                # diagnosis in this process. A one-shot CLI run never pays for it.
                _PENDING.append((self._name, _CURRENT.get("asserted", [])))
                _CURRENT.clear()
            if error:
                if "error code: 303" in error:
                    # ERR_MAX_STACK_SIZE: more than 64 list tests under one alpha node (see alpha_fanout).
                    error += (
                        " (durable-rules' alpha stack overflowed: too many range tests, `in` lists or joins"
                        " behind the same tests; `mldebug-rules rules lint` names the crowded node)"
                    )
                raise EngineError(error)
