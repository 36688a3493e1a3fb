"""The promptpack Python package against a real packd, packs sealed by the real packer, and
the same cache pack-client uses."""

import json
import re
import subprocess
import time

import pytest

import promptpack
from conftest import BUILTIN, binary, copy_with_marker

MEMORY = "shared/memory.hbs"
VARS = {"data_dir": "/data"}


def open_client(tmp_path, bundled, config=None, version="1.0.0", cache="cache"):
    return promptpack.Client(
        cache_dir=tmp_path / cache,
        builtin_dir=bundled,
        config=config,
        client_version=version,
    )


def test_with_no_server_the_bundled_prompts_serve(tmp_path, bundled):
    client = open_client(tmp_path, bundled)
    snapshot = client.capture()
    assert (snapshot.name, snapshot.version, snapshot.source) == ("builtin", "0.0.0", "builtin")
    assert snapshot.sequence == 0 and snapshot.schema == 1
    assert re.fullmatch(r"[0-9a-f]{64}", snapshot.sha256)
    text = snapshot.render(MEMORY, VARS)
    assert "/data" in text and "BUNDLED-PROMPTS" in text
    assert snapshot.read("README.md") == (bundled / "README.md").read_bytes()
    assert MEMORY in snapshot.keys()


def test_the_bundled_digest_matches_the_compiled_in_pack_for_the_same_files(tmp_path):
    # packs/builtin read at run time has the digest pack-client's compiled-in copy reports.
    client = open_client(tmp_path, BUILTIN)
    status = json.loads(
        subprocess.run(
            [binary("pack-client"), "--cache", str(tmp_path / "other"), "--json", "status"],
            capture_output=True, text=True, check=True,
        ).stdout
    )
    assert client.capture().sha256 == status["serving"]["sha256"]


def test_a_bundled_directory_missing_a_required_template_is_refused(tmp_path):
    bundled = copy_with_marker(tmp_path / "bundled", "X")
    (bundled / "shared" / "persona.hbs").unlink()
    with pytest.raises(promptpack.PromptpackError) as raised:
        open_client(tmp_path, bundled)
    assert raised.value.kind == "builtin"
    assert "shared/persona.hbs" in str(raised.value)


def test_a_bundled_template_using_a_variable_outside_the_contract_is_refused(tmp_path):
    bundled = copy_with_marker(tmp_path / "bundled", "{{no_such_variable}}")
    with pytest.raises(promptpack.PromptpackError) as raised:
        open_client(tmp_path, bundled)
    assert raised.value.kind == "builtin"
    assert "no_such_variable" in str(raised.value)


def test_render_is_strict_about_missing_variables(tmp_path, bundled):
    snapshot = open_client(tmp_path, bundled).capture()
    with pytest.raises(promptpack.RenderError) as raised:
        snapshot.render(MEMORY, {})
    assert raised.value.kind == "render_failed" and "data_dir" in str(raised.value)
    with pytest.raises(promptpack.RenderError) as raised:
        snapshot.render("shared/nothing.hbs", VARS)
    assert raised.value.kind == "missing"
    with pytest.raises(TypeError):
        snapshot.render(MEMORY, {"data_dir": object()})


def test_refresh_installs_and_a_captured_snapshot_keeps_its_pack(tmp_path, bundled, publisher, packd):
    one = publisher.build("1.0.0", "PACK-ONE")
    packd.release([f">=1.0.0, <2.0.0={one}"])
    client = open_client(tmp_path, bundled, publisher.client_config(packd.url))
    assert client.refresh()["outcome"] == "installed"
    first = client.capture()
    assert (first.version, first.source, first.sequence) == ("1.0.0", "remote", 1)
    assert first.sha256 == packd.upload(one)

    two = publisher.build("1.1.0", "PACK-TWO")
    packd.release([f">=1.0.0, <2.0.0={two}"])
    client.refresh()
    assert "PACK-ONE" in first.render(MEMORY, VARS)
    assert "PACK-TWO" in client.capture().render(MEMORY, VARS)
    assert client.capture().sequence == 2


def test_the_client_version_picks_its_entry_and_outside_every_range_the_bundled_prompts(
    tmp_path, bundled, publisher, packd
):
    one = publisher.build("1.0.0", "PACK-ONE")
    packd.release([f">=1.0.0, <2.0.0={one}"])
    config = publisher.client_config(packd.url)
    pinned = open_client(tmp_path, bundled, config, version="1.4.0")
    pinned.refresh()
    assert pinned.capture().version == "1.0.0"
    newer = open_client(tmp_path, bundled, config, version="3.0.0", cache="cache-3")
    newer.refresh()
    assert newer.capture().source == "builtin"
    assert "BUNDLED-PROMPTS" in newer.capture().render(MEMORY, VARS)


def test_with_packd_down_refresh_raises_and_the_bundled_prompts_keep_serving(
    tmp_path, bundled, publisher, packd
):
    url = packd.url
    packd.stop()
    client = open_client(tmp_path, bundled, publisher.client_config(url))
    with pytest.raises(promptpack.PromptpackError) as raised:
        client.refresh()
    assert raised.value.kind == "unreachable"
    assert client.capture().source == "builtin"
    assert "BUNDLED-PROMPTS" in client.serve(MEMORY, VARS)[0]


def test_serve_holds_vars_to_the_contract_and_names_the_pack_that_serves(
    tmp_path, bundled, publisher, packd
):
    one = publisher.build("1.3.0", "PACK-ONE")
    packd.release([f">=1.0.0, <2.0.0={one}"])
    client = open_client(tmp_path, bundled, publisher.client_config(packd.url))
    client.refresh()
    # A name the contract does not have is refused before anything renders, as
    # `pack-client render` refuses it.
    with pytest.raises(promptpack.RenderError) as raised:
        client.serve(MEMORY, {"data-dir": "/data"})
    assert raised.value.kind == "contract"
    assert str(raised.value).startswith("vars: variables do not fit the contract of schema 1: data-dir")
    # A variable the template needs and the call lacks: the error is the serving pack's,
    # not the bundled prompts' that were tried after it.
    with pytest.raises(promptpack.RenderError) as raised:
        client.serve(MEMORY, {})
    assert raised.value.kind == "render_failed"
    assert str(raised.value).startswith(
        "pack builtin 1.3.0: shared/memory.hbs line 2, column 51 reads variable `data_dir`"
    ), str(raised.value)


def test_a_pack_that_fails_to_render_falls_back_whole_and_is_reported(
    tmp_path, bundled, publisher, packd
):
    # Every template of this pack also asks for `persona`, which this app never passes.
    bad = publisher.build("1.0.0", "PACK-BAD", extra="{{persona}}")
    packd.release([f">=1.0.0, <2.0.0={bad}"])
    client = open_client(tmp_path, bundled, publisher.client_config(packd.url))
    client.refresh()
    client.start()
    try:
        text, served_from, fallback = client.serve(MEMORY, VARS)
        assert "BUNDLED-PROMPTS" in text and "PACK-BAD" not in text
        assert served_from.source == "builtin"
        assert "persona" in fallback
        for _ in range(2):
            client.serve(MEMORY, VARS)
        # After three failures in a row the pack is marked bad: the bundled prompts serve.
        assert client.capture().source == "builtin"
        status = client.status()
        assert [marked["sha256"] for marked in status["bad_packs"]] == [packd.upload(bad)]
        # The failure report reaches packd's fleet view.
        deadline = time.monotonic() + 20
        while True:
            failures = packd.get_json("/v1/channels/stable/fleet")["failures"]
            ours = [f for f in failures if f["pack"] == packd.upload(bad)]
            if ours:
                break
            assert time.monotonic() < deadline, f"no failure report for the pack in {failures}"
            time.sleep(0.2)
        assert {f["client_version"] for f in ours} == {"1.0.0"}
        assert all(f["reason"].startswith("render") or f["reason"] == "marked_bad" for f in ours), ours
    finally:
        client.stop()


def test_start_watches_and_a_release_reaches_the_next_capture(tmp_path, bundled, publisher, packd):
    one = publisher.build("1.0.0", "PACK-ONE")
    packd.release([f">=1.0.0, <2.0.0={one}"])
    client = open_client(tmp_path, bundled, publisher.client_config(packd.url))
    client.refresh()
    assert client.start() is True
    try:
        two = publisher.build("1.1.0", "PACK-TWO")
        released = time.monotonic()
        packd.release([f">=1.0.0, <2.0.0={two}"])
        while client.capture().version != "1.1.0":
            assert time.monotonic() - released < 10, "the release did not arrive within 10 s"
            time.sleep(0.02)
        assert "PACK-TWO" in client.serve(MEMORY, VARS)[0]
    finally:
        client.stop()
    # Stopped: captured snapshots still render.
    assert "PACK-TWO" in client.capture().render(MEMORY, VARS)


def test_python_and_pack_client_share_one_cache(tmp_path, bundled, publisher, packd):
    one = publisher.build("1.0.0", "PACK-ONE")
    packd.release([f">=1.0.0, <2.0.0={one}"])
    config = publisher.client_config(packd.url)
    subprocess.run(
        [binary("pack-client"), "--cache", str(tmp_path / "cache"), "--config", str(config),
         "--client-version", "1.0.0", "refresh"],
        capture_output=True, check=True,
    )
    # Installed by pack-client, served by Python with packd gone.
    packd.stop()
    client = open_client(tmp_path, bundled, config)
    assert client.capture().version == "1.0.0"
    assert "PACK-ONE" in client.capture().render(MEMORY, VARS)


def test_the_type_stubs_name_what_the_module_has():
    stubs = (BUILTIN.parents[1] / "python" / "promptpack" / "_native.pyi").read_text()
    for name in ["Client", "Snapshot", "PromptpackError", "RenderError"]:
        assert f"class {name}" in stubs and hasattr(promptpack, name)
    for method in ["capture", "builtin", "serve", "refresh", "start", "stop", "status"]:
        assert hasattr(promptpack.Client, method) and f"def {method}(" in stubs
    for member in ["name", "version", "sequence", "source", "sha256", "schema", "keys", "read",
                   "render"]:
        assert hasattr(promptpack.Snapshot, member) and f"def {member}(" in stubs


def test_without_builtin_dir_the_configs_builtin_dir_serves(tmp_path, bundled):
    config = tmp_path / "client.toml"
    config.write_text(f'[updates]\nbuiltin_dir = "{bundled}"\n')
    client = promptpack.Client(cache_dir=tmp_path / "cache", config=config)
    assert "BUNDLED-PROMPTS" in client.capture().render(MEMORY, VARS)
    # Neither: the pack compiled into the wheel, the repository's packs/builtin.
    plain = promptpack.Client(cache_dir=tmp_path / "cache-2")
    assert plain.capture().sha256 == open_client(tmp_path, BUILTIN, cache="cache-3").capture().sha256
