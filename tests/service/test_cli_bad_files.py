"""Bad files given to the ``gpuplace`` command: each is refused with exit code 2 and one message naming
the file (and the line where there is one), never a traceback, and ``data ingest`` writes nothing.

Every file here is SYNTHETIC, written by the test.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.service.test_cli import gpuplace

EXIT_BAD_INPUT = 2
PHILLY_CSV = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n"
OPENB_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
OPENB_NODES = OPENB_HEADER + "node-0,64000,262144,2,P100\n"

Command = tuple[list[str], list[str]]
"""The arguments before the file and after it (``{out}`` is the ingest folder)."""

TRACE_COMMANDS: dict[str, Command] = {
    "data describe": (["data", "describe", "philly", "--path"], []),
    "data ingest": (["data", "ingest", "philly", "--path"], ["--out", "{out}"]),
}
MACHINE_COMMANDS: dict[str, Command] = {
    "cluster describe": (["cluster", "describe"], []),
    "cluster topology": (["cluster", "topology"], []),
}


def run_on(command: Command, path: Path, home: Path) -> tuple[int, str]:
    """Exit code and the whole output (stdout then stderr, newlines of wrapping removed)."""
    before, after = command
    out = gpuplace(*before, str(path), *(a.format(out=home / "tables") for a in after), home=home)
    return out.returncode, (out.stdout + out.stderr).replace("\n", "")


def assert_refused(code: int, output: str, path: Path, home: Path) -> None:
    assert code == EXIT_BAD_INPUT, output
    assert "Traceback" not in output
    assert f"error: {path}" in output
    assert not (home / "tables").exists()  # ingest loads everything before it writes anything


ENCODING_COMMANDS: dict[str, Command] = {**TRACE_COMMANDS, "cluster describe": MACHINE_COMMANDS["cluster describe"]}


def trace_or_nodes(command: str) -> str:
    """Well-formed content for ``command``: what the test then saves in a way it cannot be read."""
    return PHILLY_CSV if command in TRACE_COMMANDS else OPENB_NODES


@pytest.mark.parametrize("command", list(ENCODING_COMMANDS))
def test_binary_file_names_the_file_and_line(tmp_path: Path, command: str) -> None:
    path = tmp_path / "upload.csv"  # compressed but without its .gz: its header holds NUL bytes
    path.write_bytes(gzip.compress(trace_or_nodes(command).encode() * 50, mtime=0))
    code, output = run_on(ENCODING_COMMANDS[command], path, tmp_path)
    assert_refused(code, output, path, tmp_path)
    assert f"{path}, line 1: not text: it holds a NUL byte (binary data" in output


@pytest.mark.parametrize("command", list(ENCODING_COMMANDS))
def test_file_in_another_encoding_names_the_line_and_bytes(tmp_path: Path, command: str) -> None:
    path = tmp_path / "latin1.csv"
    content = trace_or_nodes(command).replace(",a\n", ",caf\u00e9\n").replace("node-0", "nod\u00e9-0")
    path.write_bytes(content.encode("latin-1"))  # the é on line 2 is one byte, 0xe9, which is not UTF-8
    code, output = run_on(ENCODING_COMMANDS[command], path, tmp_path)
    assert_refused(code, output, path, tmp_path)
    assert f"{path}, line 2: not UTF-8 text" in output and "(got b'\\xe9')" in output


@pytest.mark.parametrize("command", list(ENCODING_COMMANDS))
def test_utf16_file_is_named_as_utf16(tmp_path: Path, command: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(trace_or_nodes(command).encode("utf-16"))  # with a byte-order mark, as spreadsheets write it
    code, output = run_on(ENCODING_COMMANDS[command], path, tmp_path)
    assert_refused(code, output, path, tmp_path)
    assert "the file is UTF-16 text, not UTF-8" in output


@pytest.mark.parametrize("content", ["", OPENB_HEADER], ids=["empty", "openb header only"])
@pytest.mark.parametrize("command", list(MACHINE_COMMANDS))
def test_machine_file_without_machines_is_refused(tmp_path: Path, command: str, content: str) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(content)
    code, output = run_on(MACHINE_COMMANDS[command], path, tmp_path)
    assert_refused(code, output, path, tmp_path)
    assert "the file lists no machines" in output


@pytest.mark.parametrize("command", list(TRACE_COMMANDS))
def test_header_only_trace_is_refused(tmp_path: Path, command: str) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY_CSV.splitlines(keepends=True)[0])
    code, output = run_on(TRACE_COMMANDS[command], path, tmp_path)
    assert_refused(code, output, path, tmp_path)
    assert "no data rows" in output


YAML_ERRORS = {
    "tab": ("domains:\n  - name: d0\n\tracks: []\n", "line 3: not valid YAML at column 1", "'\\t'"),
    "control character": ("domains:\n  - name: d0\x07\n", "line 2: not valid YAML at column 13", "#x0007"),
    "unclosed quote": ('domains:\n  - name: "d0\n', "line 3: not valid YAML at column 1",
                       "quoted scalar that starts on line 2, column 11"),
}


@pytest.mark.parametrize("case", list(YAML_ERRORS))
def test_topology_syntax_error_names_line_and_column(tmp_path: Path, case: str) -> None:
    content, where, detail = YAML_ERRORS[case]
    path = tmp_path / "topology.yaml"
    path.write_text(content)
    code, output = run_on((["cluster", "describe", "openb", "--topology"], []), path, tmp_path)
    assert_refused(code, output, path, tmp_path)
    assert f"{path}, {where}" in output and detail in output
