"""The Zensical build (``sweeper.report.zensical``) without a browser: the docs tree and config
made for each language, and a real ``zensical build`` of a small traces folder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sweeper.errors import SweeperError
from sweeper.report import zensical as z
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run
from tests.report.site_helpers import ROOT, write_broken_trace_set

RUN = "zensical-run"


def test_links_to_a_chinese_page_point_at_the_same_language_tree() -> None:
    text = "[a](site.zh.md), [b](../x/index.zh.md#top), `cog docs/cli.zh.md`, [c](record.md)"
    assert z.language_links(text) == (
        "[a](site.md), [b](../x/index.md#top), `cog docs/cli.zh.md`, [c](record.md)"
    )


def test_each_language_tree_holds_its_own_pages_else_the_english_ones() -> None:
    files = {
        "index.md": b"en home",
        "index.zh.md": b"zh home [s](site.zh.md)",
        "only-en.md": b"en only",
        "img/chart-zh.svg": b"<svg/>",
        "runs/r/index.md": b"en run",
        "runs/r/index.zh.md": b"zh run",
    }
    en = z.language_tree(files, "en")
    zh = z.language_tree(files, "zh")
    assert en == {
        "index.md": b"en home",
        "only-en.md": b"en only",
        "img/chart-zh.svg": b"<svg/>",
        "runs/r/index.md": b"en run",
    }
    assert zh["index.md"] == b"zh home [s](site.md)"
    assert zh["runs/r/index.md"] == b"zh run"
    assert zh["only-en.md"] == b"en only"  # fallback_to_default, as the i18n plugin does
    assert zh["img/chart-zh.svg"] == b"<svg/>"


def test_the_project_config_becomes_one_config_per_language() -> None:
    config = z.read_config(ROOT / "mkdocs.yml")
    generated = ["runs/index.md", "groups/g/index.md", "compare/m/index.md"]
    zh = z.language_config(
        config, "zh", Path("zh/docs"), Path("zh/site"), "http://h/dev", generated, []
    )
    en = z.language_config(
        config,
        "en",
        Path("en/docs"),
        Path("en/site"),
        "http://h/dev/",
        generated,
        ["notebooks/explore.md"],
    )
    assert zh["site_url"] == "http://h/dev/zh/" and en["site_url"] == "http://h/dev/"
    assert zh["theme"]["language"] == "zh" and en["theme"]["language"] == "en"
    for built in (en, zh):
        names = [next(iter(p)) if isinstance(p, dict) else p for p in built["plugins"]]
        assert not set(names) & set(z.DROPPED_PLUGINS), names
        assert "search" in names
        assert "version" not in built["extra"]  # no mike versions.json beside this build
        scripts = built["extra_javascript"]
        language, charts = (
            f"assets/sweeper/{name}" for name in (z.LANGUAGE_SCRIPT, "sweeper-charts.js")
        )
        assert scripts.index(language) < scripts.index(charts)  # its click handler runs first
        text = json.dumps(built["nav"], ensure_ascii=False)
        assert ".ipynb" not in text  # no mkdocs-jupyter: its Markdown page, or nothing
        assert '"groups/g/index.md"' in text and '"compare/m/index.md"' in text
    assert [a["link"] for a in en["extra"]["alternate"]] == ["./", "zh/"]
    assert [a["link"] for a in zh["extra"]["alternate"]] == ["../", "../zh/"]
    assert "报告" in json.dumps(zh["nav"], ensure_ascii=False)  # nav_translations of mkdocs.yml
    assert "Reports" in json.dumps(en["nav"])
    assert '"Notebook": "notebooks/explore.md"' in json.dumps(en["nav"])
    assert "notebooks/" not in json.dumps(zh["nav"])  # not converted: left out


def test_links_to_a_converted_notebook_point_at_its_page() -> None:
    text = "[Notebook](notebooks/explore.ipynb), [o](other.ipynb#a)"
    assert z.notebook_links(text, ["notebooks/explore.md", "notebooks/explore_files/x.svg"]) == (
        "[Notebook](notebooks/explore.md), [o](other.ipynb#a)"
    )


@pytest.mark.slow
def test_a_notebook_is_executed_into_a_markdown_page(tmp_path: Path) -> None:
    """What mkdocs-jupyter does with execute: true, done beforehand: outputs computed now (the
    notebook holds none), its chart an SVG file beside the page."""
    import nbformat

    docs = tmp_path / "docs"
    (docs / "nb").mkdir(parents=True)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# A notebook"),
        nbformat.v4.new_code_cell("print(6 * 7)"),
        nbformat.v4.new_code_cell(
            "import altair as alt, pandas as pd\n"
            'alt.renderers.enable("svg")\n'
            'alt.Chart(pd.DataFrame({"x": [1, 2]})).mark_point().encode(x="x")'
        ),
    ]
    nbformat.write(notebook, docs / "nb" / "a.ipynb")
    converted = z.notebook_pages(docs, tmp_path / "cache")
    page = converted["nb/a.md"].decode()
    assert "# A notebook" in page and "42" in page
    images = [p for p in converted if p.startswith("nb/a_files/") and p.endswith(".svg")]
    assert images and b"<svg" in converted[images[0]]
    assert f"]({images[0].removeprefix('nb/')})" in page


@pytest.mark.slow
def test_a_failing_cell_is_an_error_naming_the_notebook(tmp_path: Path) -> None:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("1 / 0")]
    (tmp_path / "docs").mkdir()
    nbformat.write(notebook, tmp_path / "docs" / "bad.ipynb")
    with pytest.raises(
        SweeperError, match=r"(?s)bad\.ipynb failed when executed.*1 / 0.*ZeroDivisionError"
    ):
        z.notebook_pages(tmp_path / "docs", tmp_path / "cache")


def test_the_written_config_keeps_the_python_slugify_of_the_toc() -> None:
    """mkdocs.yml names a Python function for the heading ids; the written config keeps the
    tag, and PyYAML's full loader (which Zensical uses) builds the same function from it."""
    config = z.read_config(ROOT / "mkdocs.yml")
    text = yaml.dump(config, Dumper=z._Dumper, allow_unicode=True, sort_keys=False)
    assert "!!python/object/apply:pymdownx.slugs.slugify" in text
    loaded = yaml.load(text, Loader=yaml.Loader)  # the project's own config
    toc = next(
        e["toc"] for e in loaded["markdown_extensions"] if isinstance(e, dict) and "toc" in e
    )
    assert toc["slugify"]("吞吐与延迟的兑换率", "-") == "吞吐与延迟的兑换率"
    assert toc["slugify"]("KV Cache", "-") == "kv-cache"


def test_env_tags_are_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mkdocs.yml").write_text(
        "site_url: !ENV [SWEEPER_TEST_URL, 'http://default/']\nother: !ENV [SWEEPER_TEST_NONE, 3]\n"
    )
    monkeypatch.setenv("SWEEPER_TEST_URL", "https://example.org/x/")
    monkeypatch.delenv("SWEEPER_TEST_NONE", raising=False)
    assert z.read_config(tmp_path / "mkdocs.yml") == {
        "site_url": "https://example.org/x/",
        "other": 3,
    }


def test_a_missing_zensical_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zensical", None)  # import zensical raises ImportError
    with pytest.raises(SweeperError, match=r"pip install 'zensical==0\.0\.73'.*make site-zensical"):
        z.zensical_command()


@pytest.fixture(scope="module")
def small_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ztraces")
    write_synthetic_run(
        root, RUN, [SyntheticLevel(1, 40, 12), SyntheticLevel(4, 60, 13)], output_len=32
    )
    return root


@pytest.fixture(scope="module")
def zensical_build(tmp_path_factory: pytest.TempPathFactory, small_traces: Path) -> z.BuildResult:
    pytest.importorskip("zensical", reason="Zensical is not installed: make site-zensical")
    work = tmp_path_factory.mktemp("zbuild")
    return z.build_site(
        work / "site",
        traces_dir=small_traces,
        work_dir=work / "work",
        site_url="http://127.0.0.1:8000/dev/",
        strict=True,
    )


def test_zensical_builds_both_languages(zensical_build: z.BuildResult) -> None:
    site = zensical_build.site_dir
    assert set(zensical_build.seconds) == {"en", "zh"}
    for prefix, lang in (("", "en"), ("zh/", "zh")):
        page = (site / prefix / "runs" / RUN / "index.html").read_text(encoding="utf-8")
        assert f'<html lang="{lang}"' in page
        assert page.count('class="sweeper-chart"') >= 6
        for asset in ("vega-bundle.js", z.LANGUAGE_SCRIPT, "sweeper-charts.js", "sweeper.css"):
            assert (site / prefix / "assets" / "sweeper" / asset).is_file()
        assert f'hreflang="{"zh" if lang == "en" else "en"}"' in page
        index = json.loads((site / prefix / "search.json").read_text(encoding="utf-8"))
        assert index["config"]["lang"] == [lang]
        locations = [item["location"] for item in index["items"]]
        assert any(loc.startswith(f"runs/{RUN}/") for loc in locations)
    for prefix in ("", "zh/"):  # executed beforehand (no mkdocs-jupyter), linked from home
        assert (site / prefix / "notebooks" / "explore" / "index.html").is_file()
        assert 'href="notebooks/explore/"' in (site / prefix / "index.html").read_text()
    zh_page = (site / "zh" / "runs" / RUN / "index.html").read_text(encoding="utf-8")
    assert "吞吐与延迟的兑换率" in zh_page
    zh_index = (site / "zh" / "search.json").read_text(encoding="utf-8")
    assert "兑换率" in zh_index
    # The English index holds the English run pages only (docs/site quotes the Chinese heading,
    # so the whole index may hold it, never a run page's entry).
    en_index = json.loads((site / "search.json").read_text(encoding="utf-8"))
    en_runs = [item for item in en_index["items"] if item["location"].startswith("runs/")]
    assert en_runs
    assert not any("吞吐与延迟的兑换率" in json.dumps(item, ensure_ascii=False) for item in en_runs)
    assert (site / z.SITE_MARKER).is_file()


def test_a_strict_build_names_the_trace_set_left_out(tmp_path: Path, small_traces: Path) -> None:
    pytest.importorskip("zensical", reason="Zensical is not installed: make site-zensical")
    import shutil

    traces = tmp_path / "traces"
    shutil.copytree(small_traces, traces)
    write_broken_trace_set(traces)
    (traces / "broken-study").mkdir()
    (traces / "broken-study" / "study.json").write_text("{not json")
    with pytest.raises(SweeperError, match=r"broken-run: left out of the site") as raised:
        z.build(tmp_path / "site", traces_dir=traces, work_dir=tmp_path / "work", strict=True)
    # The MkDocs plugin's strict warnings, in its words.
    assert "broken-study: the study has no page (its summary failed)" in str(raised.value)
    assert (tmp_path / "site" / "runs" / RUN / "index.html").is_file()  # built all the same
    assert (tmp_path / "site" / "zh" / "runs" / "index.html").is_file()


def test_an_output_folder_it_did_not_build_is_never_replaced(
    tmp_path: Path, small_traces: Path
) -> None:
    """Refused before anything is built (no work folder made), and at the copy too."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(SweeperError, match=r"mine exists and is not a site built by sweeper"):
        z.build(out, traces_dir=small_traces, work_dir=tmp_path / "work")
    assert not (tmp_path / "work").exists()
    with pytest.raises(SweeperError, match=r"is not a site built by sweeper"):
        z._assemble(out, {"en": tmp_path})
    assert (out / "notes.txt").read_text() == "keep me"


def test_a_missing_traces_folder_is_an_error(tmp_path: Path) -> None:
    pytest.importorskip("zensical", reason="Zensical is not installed: make site-zensical")
    with pytest.raises(SweeperError, match="does not exist"):
        z.build(tmp_path / "site", traces_dir=tmp_path / "nope", work_dir=tmp_path / "work")
    assert not (tmp_path / "site").exists()


def test_a_nav_listing_a_generated_page_already_gets_no_second_entry() -> None:
    """As site.extend_nav (both engines): a page the nav lists stays where it is."""
    config = z.read_config(ROOT / "mkdocs.yml")
    generated = ["runs/index.md", "groups/g/index.md", "compare/m/index.md"]
    config["nav"] = [
        "index.md",
        {"Reports": ["runs/index.md", {"Mine": "compare/m/index.md"}]},
    ]
    built = z.language_config(config, "en", Path("d"), Path("s"), "http://h/", generated, [])
    assert built["nav"] == [
        "index.md",
        {"Reports": ["runs/index.md", "groups/g/index.md", {"Mine": "compare/m/index.md"}]},
    ]


def _site(root: Path, text: str) -> dict[str, Path]:
    """Two languages' builds, as Zensical leaves them in the work folder."""
    for lang in ("en", "zh"):
        (root / lang).mkdir(parents=True, exist_ok=True)
        (root / lang / "index.html").write_text(f"{text} {lang}")
    return {"en": root / "en", "zh": root / "zh"}


def test_an_interrupted_copy_leaves_the_site_before_and_later_builds_proceed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or a full disk) in the middle of the copy: the output folder is still the site
    before, whole and marked; nothing is left beside it; the next build replaces it."""
    import shutil

    out = tmp_path / "site"
    z._assemble(out, _site(tmp_path / "a", "old"))
    real = shutil.copytree
    calls: list[object] = []

    def interrupted(src: Path, dst: Path, *args: object, **kwargs: object) -> object:
        calls.append(src)
        if Path(src).name == "zh":  # the English site copied, the Chinese one not
            raise KeyboardInterrupt
        return real(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(z.shutil, "copytree", interrupted)
    new = _site(tmp_path / "b", "new")
    with pytest.raises(KeyboardInterrupt):
        z._assemble(out, new)
    monkeypatch.setattr(z.shutil, "copytree", real)
    assert (out / "index.html").read_text() == "old en" and (out / z.SITE_MARKER).is_file()
    assert (out / "zh" / "index.html").read_text() == "old zh"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "site"]
    z.check_out_dir(out)  # not refused
    z._assemble(out, new)
    assert (out / "index.html").read_text() == "new en"
    assert (out / "zh" / "index.html").read_text() == "new zh"


def test_a_folder_left_by_a_killed_build_is_removed_by_the_next(tmp_path: Path) -> None:
    """A build killed (SIGKILL) while copying leaves its marked folder beside the site: the
    next build removes it; a folder of that name without the marker is not sweeper's: kept."""
    out = tmp_path / "site"
    left = tmp_path / f".site.new.x1{z._TEMPORARY}"
    (left / "runs").mkdir(parents=True)
    (left / z.SITE_MARKER).write_text("")
    empty = tmp_path / f".site.new.x2{z._TEMPORARY}"
    empty.mkdir()
    other = tmp_path / f".site.new.x3{z._TEMPORARY}"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    z._assemble(out, _site(tmp_path / "b", "new"))
    assert not left.exists() and not empty.exists()
    assert (other / "notes.txt").read_text() == "keep me"
    assert (out / "index.html").read_text() == "new en" and (out / z.SITE_MARKER).is_file()
    assert oct((out).stat().st_mode & 0o777) == "0o755"


def _tiny_notebook(path: Path) -> None:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)


def test_the_notebook_key_is_what_it_reads(tmp_path: Path) -> None:
    """Its project's traces/ (the folder of the mkdocs.yml above it) by names, sizes and
    contents: a rewritten column cache or a touched file is no change, new contents are."""
    from sweeper.report import zensical_notebook as zn

    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")
    run = tmp_path / "traces" / "run"
    (run / ".sweeper-columns").mkdir(parents=True)
    (run / "tokens.jsonl").write_text("a\n")
    notebook = tmp_path / "docs" / "nb" / "a.ipynb"
    _tiny_notebook(notebook)
    assert zn.notebook_traces(notebook) == tmp_path / "traces"
    key = zn._cache_key(notebook)
    (run / ".sweeper-columns" / "cols.arrow").write_bytes(b"rewritten cache")
    (run / ".sweeper-columns-v2.tmp").write_bytes(b"x")
    os.utime(run / "tokens.jsonl", (1, 1))
    assert zn._cache_key(notebook) == key
    (run / "tokens.jsonl").write_text("b\n")  # same size, other contents
    assert zn._cache_key(notebook) != key


@pytest.mark.slow
def test_the_notebook_cache_is_json_and_a_corrupt_one_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sweeper.report import zensical_notebook as zn

    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")
    (tmp_path / "traces" / "run" / ".sweeper-columns").mkdir(parents=True)
    _tiny_notebook(tmp_path / "docs" / "a.ipynb")
    executed: list[Path] = []
    real = zn.notebook_markdown

    def counted(path: Path) -> dict[str, bytes]:
        executed.append(path)
        return real(path)

    monkeypatch.setattr(zn, "notebook_markdown", counted)
    cache = tmp_path / "cache"
    first = zn.notebook_pages(tmp_path / "docs", cache)
    assert "42" in first["a.md"].decode() and len(executed) == 1
    (cached,) = cache.iterdir()
    assert cached.suffix == ".json" and json.loads(cached.read_text())["files"]
    (tmp_path / "traces" / "run" / ".sweeper-columns" / "c").write_bytes(b"cache rewritten")
    assert zn.notebook_pages(tmp_path / "docs", cache) == first and len(executed) == 1
    for corrupt in (b"", b"{not json", b'{"format": 1, "files": {"a.md": "%%%"}}', b"\xff\xfe"):
        cached.write_bytes(corrupt)
        assert zn.notebook_pages(tmp_path / "docs", cache) == first  # rebuilt, no crash
    assert len(executed) == 5
    assert [p.name for p in cache.iterdir()] == [cached.name]  # no temporary file left


def _processes() -> dict[int, tuple[int, str]]:
    """Every process of this machine: pid -> (process group, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":  # a zombie has ended
            found[int(entry.name)] = (int(fields[2]), command)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_build_leaves_no_zensical_running(
    tmp_path: Path, small_traces: Path, signum: int
) -> None:
    """Ctrl-C or SIGTERM to the Python process while both Zensical builds run: it exits, and
    no process of either build (nor of their process groups) is left."""
    pytest.importorskip("zensical", reason="Zensical is not installed: make site-zensical")
    work = tmp_path / "work"
    script = (
        "import sys\nfrom pathlib import Path\nfrom sweeper.report import zensical as z\n"
        f"z.build(Path({str(tmp_path / 'site')!r}), traces_dir=Path({str(small_traces)!r}), "
        f"work_dir=Path({str(work)!r}))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        builds: dict[int, tuple[int, str]] = {}
        while time.monotonic() < deadline and parent.poll() is None:
            builds = {
                pid: info
                for pid, info in _processes().items()
                if pid != parent.pid and "zensical build -f" in info[1] and str(work) in info[1]
            }
            if len(builds) == 2:
                break
            time.sleep(0.02)
        assert len(builds) == 2, f"both Zensical builds did not start: {builds}"
        # Held mid-build (a small build ends in a second or two, before the check below).
        for pid in builds:
            os.kill(pid, signal.SIGSTOP)
        interrupted = time.monotonic()
        parent.send_signal(signum)
        _, stderr = parent.communicate(timeout=60)
        elapsed = time.monotonic() - interrupted
        groups = set(builds)  # each build leads a process group of its own
        left = {
            pid: info
            for pid, info in _processes().items()
            if info[0] in groups or pid in builds or (pid != parent.pid and str(work) in info[1])
        }
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in builds:  # what a failing build left: not left running after the test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert parent.returncode != 0
    assert b"KeyboardInterrupt" in stderr, stderr.decode(errors="replace")[-2000:]
    assert not left, f"still running after the interrupt: {left}"
    # Stopped at once (SIGCONT after SIGTERM: a held process is not waited for until SIGKILL).
    assert elapsed < z.STOP_GRACE_S, elapsed
    assert not (tmp_path / "site").exists()
