"""The `herald` command's registry: every name in it resolves, a provider that is not installed
is told apart from a broken one, and a section's key is its own (the proxy never sees it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from configuration import ConfigError
from herald import cli
from herald.cli import command_parser
from herald.registry import COMMANDS, SECTIONS, Command, NotInstalled, Section, resolve
from herald.sections import read_sections
from tests.support.herald_process import REPO


def test_every_command_and_section_names_a_function_that_exists() -> None:
    refs = [c.run for c in COMMANDS] + [c.arguments for c in COMMANDS if c.arguments]
    refs += [s.read for s in SECTIONS]
    for ref in refs:
        assert callable(resolve(ref)), ref
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)
    assert {s.name for s in SECTIONS} >= {c.section for c in COMMANDS if c.section}


def test_a_command_that_reads_a_section_takes_the_file_as_config() -> None:
    for command in COMMANDS:
        if command.section is not None:
            args = command_parser(command).parse_args(["--config", "f.yaml"])
            assert args.config == Path("f.yaml"), command.name


def test_a_missing_provider_is_not_installed_but_a_broken_one_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(NotInstalled, match="absent_product.config is not installed"):
        resolve("absent_product.config:parse")
    (tmp_path / "broken_product.py").write_text("import absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_product", raising=False)
    with pytest.raises(ModuleNotFoundError) as info:
        resolve("broken_product:parse")
    assert not isinstance(info.value, NotInstalled)
    assert info.value.name == "absent_dependency"


def test_a_section_of_a_product_not_installed_is_left_alone(tmp_path: Path) -> None:
    """The proxy's image has no pipeline: its sections are read, the other product's key is
    neither read nor refused as unknown."""
    doc = yaml.safe_load((REPO / "proxy.yaml").read_text())
    path = tmp_path / "herald.yaml"
    path.write_text(yaml.safe_dump({**doc, "elsewhere": {"anything": 1}}))
    sections = (*SECTIONS, Section("elsewhere", "absent_product.config:parse", "elsewhere"))
    read = read_sections(path, sections)
    assert read["elsewhere"] is None and read["pipeline"] is not None
    assert read["proxy"].listen.bootstrap.port == 19092
    with pytest.raises(ConfigError) as info:  # unclaimed, the key is the proxy's to refuse
        read_sections(path)
    assert info.value.errors == (f"{path}: elsewhere: unknown key",)


def test_a_command_whose_product_is_not_installed_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cli, "COMMANDS", (*COMMANDS, Command("gone", "x", "absent_product:main")))
    assert cli.main(["gone", "--anything"]) == 2
    assert capsys.readouterr().err == (
        "herald gone: not available here (absent_product is not installed)\n")
