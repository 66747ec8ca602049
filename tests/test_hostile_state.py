"""The state the toolkit keeps for itself, treated as hostile: secrets never at rest, state files opened
safely, its own files validated like user input, sizes bounded by construction, and ``lore status`` never
hanging. Each case fails if its boundary were missing."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import zipfile
from collections import deque
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from gemini_stub import GeminiStub  # noqa: E402
from workflow_helpers import HANG_GUARD_S, REPO, snapshot  # noqa: E402

from lore.config import ConfigError, build_config  # noqa: E402
from lore.llm.backends import BackendResponse, GeminiBackend, LLMConfigError, ReplayBackend  # noqa: E402
from lore.llm.cache import AdviceCache  # noqa: E402
from lore.llm.controller import EnvQuery, LLMController  # noqa: E402
from lore.llm.ledger import LedgerError, read_ledger  # noqa: E402
from lore.llm.schema import MAX_ANSWER_CHARS  # noqa: E402
from lore.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402
from lore.train.trainer import train  # noqa: E402
from lore.utils.io import UnsafeFileError, exclusive_dir_lock  # noqa: E402

A = 7
ACTIONS = ["left", "right", "forward", "pickup", "drop", "toggle", "done"]


def within(seconds: float, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on a thread; fails the test (instead of hanging it) after ``seconds``."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as e:  # re-raised in the test's thread
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{getattr(fn, '__name__', fn)} did not finish within {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def one_line(message: str) -> str:
    assert "\n" not in message.strip() and "Traceback" not in message, message
    return message


# =============================================================================== 1. no secret at rest

def forms(key: str) -> set[bytes]:
    """Every encoding of ``key`` a file could hold it in (written independently of lore's own list)."""
    texts = {key, json.dumps(key)[1:-1], json.dumps(key, ensure_ascii=False)[1:-1], repr(key)[1:-1],
             ascii(key)[1:-1], quote(key, safe=""), quote_plus(key)}
    out = {t.encode("utf-8") for t in texts} | {key.encode("utf-16-le")}
    out.add(repr(key.encode())[2:-1].encode())
    return {f for f in out if len(f) >= 6}


def written_bytes(root: Path) -> list[tuple[str, bytes]]:
    """Every file under ``root`` as bytes, and each member of a zip file (a torch checkpoint) unpacked."""
    blobs = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if not path.is_file():
                continue
            data = path.read_bytes()
            blobs.append((str(path), data))
            if zipfile.is_zipfile(io.BytesIO(data)):
                with zipfile.ZipFile(io.BytesIO(data)) as z:
                    blobs += [(f"{path}!{m}", z.read(m)) for m in z.namelist()]
    return blobs


def assert_no_key(key: str, root: Path, *texts: str) -> None:
    found = [(where, f) for where, data in written_bytes(root) for f in forms(key) if f in data]
    found += [("log/message", f) for t in texts for f in forms(key) if f in t.encode()]
    assert not found, f"the key was written: {found[:3]}"


def planted(key: str, valid: bool = True) -> str:
    """An answer carrying ``key`` in every field an answer can have (and some it cannot)."""
    logits = [0.0] * A
    logits[2] = 3.0
    data = {"action_prior": {"logits": logits if valid else logits + [0.0], "note": key}, "confidence": 0.7,
            "plan": [2], "subgoal": f"reach {key}", "notes": f"the key is {key}", "features_code": f"# {key}",
            "extra": [key, {key: key}]}
    return json.dumps(data)


SECRET_KEYS = {
    "plain": "AIzaPLAIN-0123456789abcdef",
    "quote": 'AIza"QUOTE"-0123456789',
    "backslash": "AIza\\BACK\\SLASH-01234",
    "quote_backslash": 'AIza\\"both\\"-012345',
    "newline": "AIzaNEW\nLINE-0123456789",
    "tab": "AIzaTAB\tBED-0123456789",
    "unicode": "AIzaÜNICODÉ-ключ-0123",
    "emoji": "AIza🔑EMOJI-0123456789",
    "single_quote": "AIza'SINGLE'-0123456",
    "url_chars": "AIza/+=&?%-0123456789",
}


class PlantingBackend:
    """An in-line backend whose answers, errors and raw texts carry the key."""

    name = "planting"
    model = "planting-1"
    cache_tag = ""
    needs_snapshot = False
    inline = True

    def __init__(self, key: str):
        from lore.llm.backends import LLMError

        self.answers = deque([planted(key), planted(key, valid=False), LLMError(f"HTTP 401: bad key {key!r} / {key}"),
                              json.dumps({"notes": key}), f"not json {key}", {"action_prior": {"logits": [0.0] * A},
                                                                               "confidence": 0.5, "notes": key}])

    def complete(self, request):
        item = self.answers.popleft() if self.answers else planted("nothing")
        if isinstance(item, Exception):
            raise item
        return BackendResponse(text=item, model=self.model)

    def close(self):
        pass


@pytest.mark.parametrize("case", sorted(SECRET_KEYS))
def test_a_planted_key_is_in_no_byte_the_controller_writes(case, tmp_path, monkeypatch, caplog):
    key = SECRET_KEYS[case]
    monkeypatch.setenv("GEMINI_API_KEY", key)
    cfg = build_config(overrides=["llm.backend=scripted", f"llm.cache_path={tmp_path / 'llm_cache.sqlite'}",
                                  "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0"])
    ctl = LLMController(cfg, tmp_path, ACTIONS, "minigrid", backend=PlantingBackend(key))
    for step in range(6):
        ctl.maybe_request(step, [EnvQuery(step, f"s{step}", lambda s=step: f"state {s}", None, 1.0)])
        advice = ctl.current(step, f"s{step}", step)
        if step == 0:
            assert advice is not None and "***" in advice.subgoal  # applied, and redacted
    save_checkpoint(tmp_path / "checkpoint.pt", {"controller": ctl.state_dict()})
    ctl.close()
    assert len((tmp_path / "llm_calls.jsonl").read_text().splitlines()) == 6
    assert_no_key(key, tmp_path, caplog.text)


def test_a_gemini_run_with_a_planted_key_writes_it_nowhere(tmp_path, monkeypatch, caplog, capfd):
    """`lore train` through the real client: answers and errors carrying the key (quotes and backslashes
    included) leave it in no file of the run (checkpoint unpacked), no log and no output."""
    key = 'AIza"q\\b-0123456789xyz'
    monkeypatch.setenv("GEMINI_API_KEY", key)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    with GeminiStub(num_actions=A, best_action=2) as stub:
        stub.push(f"error:400:API key {key} not valid", *[f"text:{planted(key)}"] * 40)
        cfg = build_config(overrides=["llm.backend=gemini", f"llm.base_url={stub.base_url}", "llm.timeout_s=2",
                                      "llm.retries=0", "llm.max_wait_ms=2000", "model.preset=debug",
                                      "train.steps=64", "train.prefill=32", "train.batch_length=8",
                                      "train.train_ratio=8", "train.tensorboard=false", "train.checkpoint_every=32",
                                      "eval.every=1000", "eval.episodes=1", "env.max_episode_steps=20",
                                      "llm.controller.budget=8", "llm.controller.cooldown=2", "device=cpu"],
                           ablation="prior_only")
        train(cfg, tmp_path / "run", show_progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "llm_calls.jsonl").read_text().splitlines()]
    assert records[0]["failure"] == "http_error" and "***" in records[0]["error"]
    assert any(r["ok"] and "***" in json.dumps(r["answer"]) for r in records)  # the planted answers arrived
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    out, err = capfd.readouterr()
    assert_no_key(key, tmp_path, caplog.text, out, err)


BAD_HEADER_KEYS = {"newline": "AIza-line\nbreak-0123456", "carriage_return": "AIza-cr\rreturn-0123",
                   "unicode": "AIza-ключ-0123456789", "nul": "AIza-nul\x00byte-01234", "tab": "AIza-tab\tkey-0123"}


@pytest.mark.parametrize("case", sorted(BAD_HEADER_KEYS))
def test_a_key_that_cannot_be_sent_is_refused_without_showing_it(case, monkeypatch):
    key = BAD_HEADER_KEYS[case]
    if "\x00" in key:  # the environment cannot hold a NUL: the backend reads the value as given
        monkeypatch.setattr(os, "environ", {**os.environ, "GEMINI_API_KEY": key})
    else:
        monkeypatch.setenv("GEMINI_API_KEY", key)
    with pytest.raises(LLMConfigError) as info:
        GeminiBackend("m", base_url="http://127.0.0.1:9")
    message = one_line(str(info.value))
    assert message.startswith("GEMINI_API_KEY: ") and "not shown" in message
    for fragment in [key, *key.splitlines(), repr(key)[1:-1]]:
        assert fragment not in message


# =============================================================================== 2. state files opened safely

def make_special(path: Path, kind: str, outside: Path) -> None:
    """Put ``kind`` where ``path`` should be a regular file."""
    if kind == "symlink_out":
        outside.write_text("precious data\n")
        path.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(path.parent / "nowhere")


STATE_NAMES = (".lock", "checkpoint.pt", "done", "config.yaml", "llm_calls.jsonl", "metrics.csv", "eval.csv",
               "episodes.csv", "train.log", "llm_cache.sqlite")
KINDS = ("symlink_out", "fifo", "dir", "dev_zero", "dangling")


def tiny_cfg(*overrides: str):
    return build_config(overrides=["llm.backend=scripted", "model.preset=debug", "train.steps=64",
                                   "train.prefill=32", "train.batch_length=8", "device=cpu", *overrides])


@pytest.mark.parametrize("name", STATE_NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_state_file_that_is_not_a_regular_file_in_its_folder_is_refused_at_start(name, kind, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    make_special(run / name, kind, tmp_path / "victim.txt")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError) as info:
        within(30, train, tiny_cfg(), run, show_progress=False)
    assert name in one_line(str(info.value))
    assert snapshot(tmp_path) == before  # nothing written, the link's target untouched


def test_the_lock_never_writes_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(victim)
    with pytest.raises(UnsafeFileError, match="symbolic link"), exclusive_dir_lock(run):
        pass
    assert victim.read_text() == "precious data\n"


@pytest.mark.parametrize("kind", KINDS)
def test_state_readers_refuse_what_is_not_a_regular_file(kind, tmp_path):
    for name, read, error in (("checkpoint.pt", load_checkpoint, CheckpointError),
                              ("llm_calls.jsonl", read_ledger, LedgerError),
                              ("llm_cache.sqlite", AdviceCache, ValueError)):
        path = tmp_path / name
        make_special(path, kind, tmp_path / f"{name}.victim")
        if kind == "symlink_out" and name != "llm_cache.sqlite":  # a readable link out: read, but never written
            continue
        with pytest.raises(error) as info:
            within(10, read, path)
        assert name in one_line(str(info.value))


# =============================================================================== 3. own state validated

def good_cache(path: Path) -> None:
    cache = AdviceCache(path)
    cache.put("b", "m", "h", {"action_prior": {"logits": [0.0]}, "confidence": 0.5})
    cache.close()


def _sql(statements: str):
    def apply(path: Path) -> None:
        conn = sqlite3.connect(path)
        conn.executescript(statements)
        conn.close()
    return apply


def _truncate(path: Path) -> None:
    good_cache(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _bitrot(path: Path) -> None:
    good_cache(path)
    data = bytearray(path.read_bytes())
    data[4096:4104] = b"\xff" * 8  # the header of the answers table's page
    path.write_bytes(bytes(data))


BAD_CACHES = {
    "truncated": _truncate,
    "text_file": lambda p: p.write_text("answers\n"),
    "header_only": lambda p: p.write_bytes(b"SQLite format 3\x00"),
    "foreign_db": _sql("CREATE TABLE users (id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'x');"),
    "missing_column": _sql("CREATE TABLE answers (backend TEXT, model TEXT, prompt_hash TEXT, tag TEXT, answer TEXT);"),
    "extra_column": _sql("CREATE TABLE answers (backend TEXT NOT NULL, model TEXT NOT NULL, prompt_hash TEXT NOT "
                         "NULL, tag TEXT NOT NULL, answer TEXT NOT NULL, raw TEXT, tokens_in INTEGER NOT NULL "
                         "DEFAULT 0, tokens_out INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL, evil BLOB, "
                         "PRIMARY KEY (backend, model, prompt_hash, tag));"),
    "answers_is_a_view": _sql("CREATE TABLE t (x); CREATE VIEW answers AS SELECT x FROM t;"),
    "bit_rot": _bitrot,
}


@pytest.mark.parametrize("case", sorted(BAD_CACHES))
def test_a_damaged_or_foreign_cache_is_refused_before_the_run_writes(case, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    BAD_CACHES[case](run / "llm_cache.sqlite")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError) as info:
        within(30, train, tiny_cfg(), run, show_progress=False)
    message = one_line(str(info.value))
    assert message.startswith("llm.cache_path: ") and "llm_cache.sqlite" in message
    assert snapshot(tmp_path) == before
    with pytest.raises(ValueError, match="llm_cache.sqlite"):
        AdviceCache(run / "llm_cache.sqlite", readonly=True)


BAD_ROWS = {
    "not_utf8": ("answer", b"\xff\xfe{}", "blob_as_text"),
    "deep": ("answer", "[" * 5000 + "]" * 5000, None),
    "deep_object": ("answer", json.dumps({"a": [[[[[[[[[[[[1]]]]]]]]]]]]}), None),
    "not_an_object": ("answer", "[1, 2]", None),
    "not_json": ("answer", "{truncated", None),
    "blob": ("answer", b"{}", "blob"),
    "integer": ("answer", 7, None),
    "huge_number": ("answer", '{"x": ' + "9" * 5000 + "}", None),
    "raw_a_number": ("raw", "12", None),
    "raw_not_utf8": ("raw", b"\x80abc", "blob_as_text"),
    "tokens_text": ("tokens_in", "many", None),
    "oversize": ("answer", json.dumps({"notes": "x" * (4 * MAX_ANSWER_CHARS + 10)}), None),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_corrupt_cache_row_is_a_counted_miss(case, tmp_path):
    path = tmp_path / "cache.sqlite"
    good_cache(path)
    column, value, how = BAD_ROWS[case]
    conn = sqlite3.connect(path)
    if how == "blob_as_text":
        conn.execute(f"UPDATE answers SET {column} = CAST(? AS TEXT)", (value,))
    else:
        conn.execute(f"UPDATE answers SET {column} = ?", (value,))
    conn.commit()
    conn.close()
    for readonly in (False, True):
        cache = AdviceCache(path, readonly=readonly)
        assert cache.get("b", "m", "h") is None
        assert cache.corrupt_rows == 1
        cache.close()


def ledger_line(**changes) -> str:
    record = {"env_step": 0, "answered_step": 0, "answered_phase": 1, "env_index": 0, "backend": "gemini",
              "model": "m", "source": "backend", "prompt_hash": "h", "state_key": "s", "latency_ms": 1.0,
              "ok": True, "failure": None, "error": None, "cache_hit": False, "tokens_in": 1, "tokens_out": 1,
              "attempts": 1, "answer": {"action_prior": {"logits": [0.0]}, "confidence": 0.5}, "raw": None,
              "prompt": "p"}
    record.update(changes)
    return json.dumps(record)


BAD_LEDGERS = {
    "deep_raw": ledger_line(raw=json.loads("[" * 200 + "]" * 200)).encode(),
    "deep_line": ("[" * 100_000 + "]" * 100_000).encode(),
    "ok_a_string": ledger_line(ok="yes").encode(),
    "step_a_string": ledger_line(answered_step="3").encode(),
    "step_a_float": ledger_line(answered_step=1.5).encode(),
    "phase_a_bool": ledger_line(answered_phase=True).encode(),
    "raw_a_number": ledger_line(raw=5).encode(),
    "answer_a_list": ledger_line(answer=[1]).encode(),
    "attempts_a_list": ledger_line(attempts=[1]).encode(),
    "hash_a_number": ledger_line(prompt_hash=5).encode(),
    "not_utf8": b'{"prompt_hash": "\xff", "ok": true}',
    "huge_number": ('{"prompt_hash": "h", "ok": true, "attempts": ' + "9" * 5000 + "}").encode(),
    "long_line": ledger_line(prompt="p" * (2 << 20)).encode(),
    "truncated": ledger_line()[:40].encode(),
    "a_list": b"[1, 2, 3]",
}


@pytest.mark.parametrize("case", sorted(BAD_LEDGERS))
def test_a_corrupt_replay_ledger_is_refused_at_start_naming_the_line(case, tmp_path):
    path = tmp_path / "llm_calls.jsonl"
    path.write_bytes(ledger_line().encode() + b"\n" + BAD_LEDGERS[case] + b"\n")
    with pytest.raises(LLMConfigError) as info:
        within(20, ReplayBackend, path)
    assert f"{path}:2" in one_line(str(info.value))
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match="llm.replay_ledger"):
        within(30, train, tiny_cfg("llm.backend=replay", f"llm.replay_ledger={path}"), run, show_progress=False)
    assert not run.exists()


def experiments_root(tmp_path: Path, declarations: dict[str, dict]) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    import shutil

    shutil.copytree(REPO / "config", root / "config", ignore=shutil.ignore_patterns("experiments"))
    (root / "config" / "experiments").mkdir()
    for name, data in declarations.items():
        (root / "config" / "experiments" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (root / "docs" / "experiments" / "records").mkdir(parents=True)
    return root


def declaration(**changes) -> dict:
    data = {"question": "Does a smaller beta_max change the full method's success?", "base": "config/config.yaml",
            "grid": {"envs": ["MiniGrid-DoorKey-5x5-v0"], "seeds": [0, 1]},
            "arms": {"rl_only": {"reference": True}, "full_half": {"ablation": "full",
                                                                    "settings": {"prior.beta_max": 0.5}}},
            "compare": [{"arm": "full_half", "vs": "rl_only"}], "metrics": ["auc"],
            "decision": {"rule": "adopt", "require": [{"arm": "full_half", "vs": "rl_only", "metric": "auc",
                                                       "test": "above"}]}}
    data.update(changes)
    return data


def experiments_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lore.experiments.cli", *args], cwd=root,
                          capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def record_text(**changes) -> str:
    rec = {"name": "exp", "commit": "abc", "verdict": "adopt", "reason": "r", "scores": None, "comparison": []}
    rec.update(changes)
    return json.dumps(rec)


BAD_RECORDS = {
    "truncated": record_text()[:30],
    "a_list": "[]",
    "a_string": '"adopt"',
    "empty": "",
    "verdict_a_number": record_text(verdict=3),
    "no_verdict": json.dumps({"name": "exp", "commit": None, "reason": "r", "comparison": []}),
    "comparison_not_rows": record_text(comparison=[1, 2]),
    "deep": record_text(scores=json.loads("[" * 50 + "]" * 50)),
    "very_deep": "[" * 100_000 + "]" * 100_000,
    "huge_number": '{"name": "exp", "verdict": ' + "9" * 5000 + "}",
    "not_utf8": '{"name": "\udcff"}',
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_bad_experiment_record_is_one_line_naming_it_and_nothing_is_written(case, tmp_path):
    root = experiments_root(tmp_path, {"exp": declaration()})
    path = root / "docs" / "experiments" / "records" / "exp.json"
    path.write_bytes(BAD_RECORDS[case].encode("utf-8", "surrogateescape"))
    before = snapshot(root)
    for args in (("note", "exp", "kept"), ("log",)):
        proc = experiments_cli(root, *args)
        assert proc.returncode == 2, proc.stderr
        line = one_line(proc.stderr.strip())
        assert line.startswith("lore: error: ") and "docs/experiments/records/exp.json" in line
        assert snapshot(root) == before


BAD_IMPORTED = {
    "truncated": "- name: x\n  question: [unclosed",
    "a_mapping": "name: x\n",
    "a_scalar": "just text\n",
    "entry_a_list": "- [1, 2]\n",
    "missing_key": "- name: x\n  question: q\n",
    "deep": "- " + "[" * 3000 + "]" * 3000 + "\n",
    "huge_number": "- name: " + "9" * 5000 + "\n",
    "not_utf8": "- name: \udcff\n",
    "fifo": None,
}


@pytest.mark.parametrize("case", sorted(BAD_IMPORTED))
def test_a_bad_imported_log_is_one_line_naming_it(case, tmp_path):
    root = experiments_root(tmp_path, {"exp": declaration()})
    path = root / "docs" / "experiments" / "imported.yaml"
    if BAD_IMPORTED[case] is None:
        os.mkfifo(path)
    else:
        path.write_bytes(BAD_IMPORTED[case].encode("utf-8", "surrogateescape"))
    before = snapshot(root)
    proc = experiments_cli(root, "log")
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr.strip())
    assert "docs/experiments/imported.yaml" in line
    assert snapshot(root) == before


BAD_NAMES = ("../x", "..", "../../etc/passwd", "a/b", "/tmp/x", "x.y", "", "1abc", "a b", "x\n", "a" * 65, "ké",
             "exp/../exp")


@pytest.mark.parametrize("name", BAD_NAMES)
def test_an_experiment_name_is_an_identifier_never_a_path(name, tmp_path):
    root = experiments_root(tmp_path, {"exp": declaration()})
    (root / "docs" / "experiments" / "records" / "exp.json").write_text(record_text())
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(declaration()))
    (tmp_path / "x.json").write_text(record_text())
    before = snapshot(tmp_path)
    for args in (("check", name), ("compare", name, "--record"), ("note", name, "text"), ("plan", name)):
        proc = experiments_cli(root, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "not an experiment name" in one_line(proc.stderr.strip()), proc.stderr
    assert snapshot(tmp_path) == before


CYCLES = {
    "two": {"a": "b", "b": "a"},
    "three": {"a": "b", "b": "c", "c": "a"},
    "tail_into_loop": {"a": "b", "b": "c", "c": "b"},
}


@pytest.mark.parametrize("case", sorted(CYCLES))
def test_a_baseline_chain_must_end(case, tmp_path):
    links = CYCLES[case]
    root = experiments_root(tmp_path, {name: declaration(baseline=base) for name, base in links.items()})
    proc = experiments_cli(root, "check", "a")
    assert proc.returncode == 2
    line = one_line(proc.stderr.strip())
    assert "baseline" in line and "cycle" in line and len(line) < 400, line


def test_a_baseline_that_is_a_path_is_refused_naming_the_key(tmp_path):
    root = experiments_root(tmp_path, {"a": declaration(baseline="../../x")})
    proc = experiments_cli(root, "check", "a")
    assert proc.returncode == 2 and "baseline" in one_line(proc.stderr.strip())


# =============================================================================== 4. bounded by construction

class SizedBackend(PlantingBackend):
    def __init__(self, answers):
        self.answers = deque(answers)


def _big_text(n: int) -> str:
    data = json.loads(planted("k"))
    data["notes"] = "x" * n
    return json.dumps(data)


BIG_ANSWERS = {
    "ten_megabytes": _big_text(10 << 20),
    "just_over_the_cap": _big_text(MAX_ANSWER_CHARS),
    "a_big_dict": {**json.loads(planted("k")), "notes": "y" * (2 * MAX_ANSWER_CHARS)},
    "many_logits": json.dumps({"action_prior": {"logits": [0.0] * 100_000}, "confidence": 0.5}),
    "long_plan": json.dumps({"action_prior": {"logits": [0.0] * A}, "confidence": 0.5, "plan": [1] * 50_000}),
}


@pytest.mark.parametrize("case", sorted(BIG_ANSWERS))
def test_an_answer_over_the_cap_is_stored_nowhere(case, tmp_path):
    cfg = build_config(overrides=["llm.backend=scripted", f"llm.cache_path={tmp_path / 'llm_cache.sqlite'}"])
    ctl = LLMController(cfg, tmp_path, ACTIONS, "minigrid", backend=SizedBackend([BIG_ANSWERS[case]]))
    ctl.maybe_request(0, [EnvQuery(0, "s", lambda: "a state", None, 1.0)])
    assert ctl.current(0, "s", 0) is None
    assert ctl.counters()["llm_failures_too_large"] == 1
    save_checkpoint(tmp_path / "checkpoint.pt", {"controller": ctl.state_dict()})
    ctl.close()
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert total < 200_000, total
    assert "cap" in json.loads((tmp_path / "llm_calls.jsonl").read_text())["error"]


MULTIPLYING = {
    "planner_work": (["plan.samples=100000", "plan.elites=8", "plan.horizon=1000", "plan.iterations=1000"],
                     "plan.samples * plan.horizon * plan.iterations"),
    "planner_work_moderate": (["plan.samples=4096", "plan.horizon=64", "plan.iterations=8"],
                              "plan.samples * plan.horizon * plan.iterations"),
    "envs_beyond_steps": (["env.num_envs=100", "train.steps=64", "train.prefill=32"], "env.num_envs"),
    "envs_eat_the_run": (["env.num_envs=40", "train.steps=64", "train.prefill=32"], "env.num_envs"),
    "envs_times_sequence": (["env.num_envs=16", "train.steps=100", "train.prefill=8", "train.batch_length=8"],
                            "env.num_envs * train.batch_length"),
}


@pytest.mark.parametrize("case", sorted(MULTIPLYING))
def test_settings_that_multiply_are_refused_before_a_run(case, tmp_path):
    overrides, key = MULTIPLYING[case]
    with pytest.raises(ConfigError) as info:
        build_config(overrides=["model.preset=debug", *overrides])
    assert one_line(str(info.value)).startswith(key)


@pytest.mark.parametrize("seed", [2**31, 2**32, 2**32 + 1, 10**20])
def test_an_experiment_seed_beyond_the_run_seed_range_fails_check(seed, tmp_path):
    root = experiments_root(tmp_path, {"exp": declaration(grid={"envs": ["MiniGrid-DoorKey-5x5-v0"],
                                                                "seeds": [0, seed]})})
    proc = experiments_cli(root, "check", "exp")
    assert proc.returncode == 2 and "grid.seeds" in one_line(proc.stderr.strip())


# =============================================================================== 5. `lore status` never hangs

def _status_tree(root: Path) -> dict[str, str]:
    """One run folder per case under ``root/<case>/full/seed0``; returns case -> what its note must say."""
    cases = {}

    def run(case: str, note: str) -> Path:
        folder = root / case / "full" / "seed0"
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text("env: {name: X}\ntrain: {steps: 100}\n")
        cases[case] = note
        return folder

    os.mkfifo(run("fifo_lock", ".lock is a FIFO") / ".lock")
    os.mkfifo(run("fifo_metrics", "metrics.csv is a FIFO") / "metrics.csv")
    os.mkfifo(run("fifo_eval", "eval.csv is a FIFO") / "eval.csv")
    folder = run("fifo_config", "config.yaml is a FIFO")
    (folder / "config.yaml").unlink()
    os.mkfifo(folder / "config.yaml")
    folder = run("fifo_train_log", "killed?")
    (folder / "metrics.csv").write_text("env_step,steps_per_s,updates\n10,1,1\n")
    os.mkfifo(folder / "train.log")
    os.mkfifo(run("fifo_done", "done marker unreadable") / "done")
    folder = run("config_dev_zero", "config.yaml is a character device")
    (folder / "config.yaml").unlink()
    (folder / "config.yaml").symlink_to("/dev/zero")
    (run("metrics_dev_zero", "metrics.csv is a character device") / "metrics.csv").symlink_to("/dev/zero")
    (run("done_dev_urandom", "done marker unreadable") / "done").symlink_to("/dev/urandom")
    (run("deep_yaml", "config.yaml corrupt") / "config.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    (run("deep_yaml_mapping", "config.yaml corrupt") / "config.yaml").write_text(
        "a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n")
    (run("done_huge_number", "done marker unreadable") / "done").write_text('{"env_step": ' + "9" * 5000 + "}")
    (run("done_big_step", "wall") / "done").write_text('{"env_step": ' + "9" * 4000 + ', "wall_s": 1e400}')
    (run("done_deep", "done marker unreadable") / "done").write_text("[" * 100_000 + "]" * 100_000)
    (run("config_huge_steps", "") / "config.yaml").write_text("train: {steps: " + "9" * 4000 + "}\n")
    (run("config_too_large", "config.yaml is larger") / "config.yaml").write_text("# " + "x" * (2 << 20) + "\n")
    (run("metrics_too_large", "metrics.csv is larger") / "metrics.csv").write_bytes(
        b"env_step\n" + b"1\n" * (17 << 20))
    (run("metrics_huge_cell", "") / "metrics.csv").write_text("env_step,steps_per_s,updates\n" + "9" * 5000 + ",1,1\n")
    (run("dir_lock", ".lock is a directory") / ".lock").mkdir()
    (run("config_not_utf8", "not UTF-8") / "config.yaml").write_bytes(b"env: {name: \xff}\n")
    (run("identity_huge", "") / "config.yaml").write_text("env: {name: " + "E" * 10_000 + "}\nseed: " +
                                                          "7" * 4000 + "\n")
    os.mkfifo(root.parent / ".grid.json") if root.name == "runs" else None
    return cases


@pytest.fixture(scope="module")
def status_result(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    root = results / "runs"
    root.mkdir()
    cases = _status_tree(root)
    proc = subprocess.run([sys.executable, "-m", "lore.cli", "status", str(results), "--json"],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env={**os.environ, "PYTHONPATH": str(REPO)})
    return cases, proc


def test_status_finishes_on_a_hostile_results_tree(status_result):
    cases, proc = status_result
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(json.loads(proc.stdout)["runs"]) == len(cases)


STATUS_CASES = ("fifo_lock", "fifo_metrics", "fifo_eval", "fifo_config", "fifo_train_log", "fifo_done",
                "config_dev_zero", "metrics_dev_zero", "done_dev_urandom", "deep_yaml", "deep_yaml_mapping",
                "done_huge_number", "done_big_step", "done_deep", "config_huge_steps", "config_too_large",
                "metrics_too_large", "metrics_huge_cell", "dir_lock", "config_not_utf8", "identity_huge")


@pytest.mark.parametrize("case", STATUS_CASES)
def test_status_reports_a_strange_run_as_a_row_saying_why(status_result, case):
    cases, proc = status_result
    rows = {Path(r["path"]).parents[1].name: r for r in json.loads(proc.stdout)["runs"]}
    assert cases[case] in rows[case]["note"], rows[case]
    assert len(rows[case]["env"]) <= 40 and len(rows[case]["seed"]) <= 40
