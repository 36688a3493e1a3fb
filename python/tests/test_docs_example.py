"""docs/PYTHON.md's own example, run as written: its three files and its config are taken
from the document, `app.py` runs in a fresh Python process against a live packd, and the
documented `packer build ... --contract app` command builds a pack of the same directory."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO, binary

DOC = (REPO / "docs" / "PYTHON.md").read_text()


def block(caption, language):
    """The fenced block of `language` that follows `caption` in docs/PYTHON.md."""
    at = DOC.index(caption)
    match = re.compile(r"```" + language + r"\n(.*?)```", re.S).search(DOC, at)
    assert match, f"no ```{language} block after {caption!r}"
    return match.group(1)


def write_example(root):
    (root / "prompts" / "agents" / "main").mkdir(parents=True)
    (root / "prompts" / "contract.json").write_text(block("`prompts/contract.json`:", "json"))
    (root / "prompts" / "agents" / "main" / "system.hbs").write_text(
        block("`prompts/agents/main/system.hbs`:", "handlebars"))
    (root / "app.py").write_text(block("`app.py`:", "python"))


def test_the_python_example_runs_as_written(tmp_path, publisher, packd):
    app = tmp_path / "app"
    app.mkdir()
    write_example(app)
    assert (app / "prompts" / "agents" / "main" / "system.hbs").read_text() == "You help {{user}}.\n"
    shutil.copytree(publisher.keys, app / "keys")
    config = block("with a `promptpack.toml` such as:", "toml")
    (app / "promptpack.toml").write_text(config.replace("http://127.0.0.1:8470", packd.url))
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "app.py"], cwd=app, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip("\n") == "You help Ada."
    assert (tmp_path / "home" / ".cache" / "my-agent" / "promptpack").is_dir()

    # The documented build of a release for it works on the same directory.
    command = re.search(r"`(packer build prompts/ --contract app [^`]*)`", DOC).group(1)
    args = shlex.split(command)
    done = subprocess.run([binary("packer"), *args[1:]], cwd=app, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "contract  app contract (contract.json)" in done.stdout
    assert (app / "my-agent-1.5.0.pack").is_file()


def test_without_its_contract_the_example_fails_as_it_did(tmp_path):
    # What a new user met before packs declared contracts: the agent's contract, which this
    # app's one template does not keep.
    import promptpack
    import pytest

    write_example(tmp_path)
    (tmp_path / "prompts" / "contract.json").unlink()
    with pytest.raises(promptpack.PromptpackError) as raised:
        promptpack.Client(cache_dir=tmp_path / "cache", builtin_dir=tmp_path / "prompts")
    assert raised.value.kind == "builtin"
    assert "unknown variable 'user'" in str(raised.value)
