"""The HTML report: one self-contained page, ``report.html``, beside ``report.md``.

``write_html(payload, report_dir)`` renders the plugin's JSON payload (``results.json``):

1. a header (implementation, device, base seed, wall time, overall verdict);
2. the conformance matrix by SPEC section (``report.summarize``: the numbers of report.md,
   with the SPEC S0 bit-identity column);
3. the tests that did not pass, with their reasons and one-line replay commands;
4. the statistical assertions, one row per :class:`~conformance.stats.StatResult`;
5. plots of every statistical record carrying ``observed`` / ``expected`` bin counts,
   grouped by SPEC section: acceptance-length laws (S5/S6/S9 records whose names say so)
   as probability mass against the exact law, every other record (samplers, the S8
   scheduler) as counts against their expectation, each with its Pearson residuals;
6. calibration numbers (``calibration.json`` of ``dspark-conformance calibrate``) and the
   mutant kill matrix (``mutants.json`` of ``dspark-conformance mutants``) when those
   files sit in ``report_dir``.

Plots need matplotlib (the ``plots`` extra; :data:`PLOTS_HINT` installs it on its own, since
the distribution is not on the package index); without it the page keeps every table and
says so. Images are base64 PNG and the CSS is inline, so the page opens offline. A plot the
data cannot support (a reliability diagram without per-bin confidences, a binomial test
without a frequency vector) is listed with the reason instead of being drawn. To add a plot:
write a ``_*_figure`` function that returns a matplotlib ``Figure`` and embed it with
:func:`_img` in a section renderer.
"""

from __future__ import annotations

import base64
import concurrent.futures
import html
import io
import json
import math
import multiprocessing
import os
import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from conformance.checks import check_float, check_int
from conformance.sections import SECTION_TITLES, SECTIONS

from . import matrix as report

__all__ = ["write_html", "render_html"]

#: How to get the plots: the ``plots`` extra is matplotlib alone, and ``pip install
#: dspark-conformance[plots]`` fails where the distribution is installed from a wheel or a checkout.
PLOTS_HINT = "pip install matplotlib"
ACCEPTANCE_SECTIONS = ("S5", "S6", "S9")
_ACCEPTANCE_NAME = re.compile(r"tau|accept|length|match-expected|multinomial")
_MAX_LEN = re.compile(r"max(\d+)|gamma(\d+)")  # max_len = gamma + 1 (SPEC S6)
_NOT_PASSED = ("failed", "error", "xpassed", "inconclusive")
_MANY_BINS = 24  # above this, bins lose their tick labels
_REQUIRED_KEYS = ("impl", "device", "base_seed", "wall_s", "tests")
_SECTION_HEADING = re.compile(r'<h2 id="([^"]+)">([^<]+)</h2>')  # the page's sections, for the nav bar

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1360px;
 padding:0 20px 40px;color:#1d2330}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;border-bottom:2px solid #dde2ea;padding-bottom:3px;
 margin-top:30px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}th,td{border:1px solid #d5dae3;padding:3px 7px;
 text-align:left;vertical-align:top}th{background:#eef1f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:9px;font-weight:600;font-size:12px;color:#fff}
.big{font-size:16px;padding:3px 14px}
.PASS,.passed,.xfailed,.killed{background:#2e8540}.FAIL,.failed,.error,.xpassed,.survived{background:#c62828}
.INCONCLUSIVE,.inconclusive{background:#d98c00}.SKIP,.skipped{background:#7a8594}.INTERRUPTED{background:#6a3d9a}
td.killed,td.survived{color:#fff;text-align:center;font-weight:600}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:8px 0}dl.meta dt{color:#5a6475}
dl.meta dd{margin:0}nav a{margin-right:14px}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#f5f7fa;border:1px solid #e1e5ec;padding:6px;overflow-x:auto;max-height:320px}
code.replay{display:block;background:#f5f7fa;padding:3px 6px;margin:2px 0 8px;word-break:break-all}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:12px}
figure{margin:0;border:1px solid #e1e5ec;border-radius:4px;padding:6px;background:#fff}
figure.fail{border:2px solid #c62828}figure img{width:100%;height:auto}figure.wide img{width:auto;max-width:100%}
figcaption{font-size:12px;color:#3c4454}.note{background:#fff8e1;border-left:4px solid #d98c00;padding:6px 10px}
.small{font-size:12px;color:#5a6475}.scroll{overflow-x:auto}td.num,td.name{white-space:nowrap}
table.stats{table-layout:fixed;width:100%}
table.stats td{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}table.stats th{overflow-wrap:anywhere}
table.stats td.wrap{white-space:normal;overflow-wrap:anywhere}
td.text{min-width:180px}td.killer{min-width:200px}td.killer,td.small{overflow-wrap:anywhere}
"""


def write_html(payload: dict[str, Any], report_dir: Path | str) -> Path:
    """Write ``report_dir/report.html`` for one run and return its path.

    Reads ``report_dir/mutants.json`` and ``report_dir/calibration.json`` when present.
    Plots are drawn when matplotlib imports, else the page says how to get them.

    Args:
        payload: the plugin's JSON payload (``results.json``): ``impl``, ``device``,
            ``base_seed`` (int), ``wall_s`` (seconds), ``tests`` (list of per-test records,
            each with ``stats``: a list of StatResult dicts).
        report_dir: an existing directory (the ``--report`` directory of the run).

    Raises:
        TypeError: ``payload`` not a dict, ``payload['tests']`` not a list, ``base_seed`` not
            an int, ``wall_s`` not a number, ``report_dir`` not a path.
        ValueError: a required key missing, ``wall_s`` negative or NaN, ``report_dir`` not
            an existing directory.

    Example:
        >>> write_html(json.loads(Path("r/results.json").read_text()), Path("r"))  # doctest: +SKIP
        PosixPath('r/report.html')
    """
    report_dir = _check_write_html(payload, report_dir)
    extras = {name: _read_json(report_dir / f"{name}.json") for name in ("mutants", "calibration")}
    path = report_dir / "report.html"
    path.write_text(render_html(payload, **extras), encoding="utf-8")
    return path


def render_html(payload: dict[str, Any], *, mutants: list[dict] | None = None,
                calibration: dict[str, Any] | None = None) -> str:
    """The page as a string (see :func:`write_html`; ``mutants`` / ``calibration`` are the
    decoded ``mutants.json`` / ``calibration.json``, or None when absent).

    Raises:
        TypeError / ValueError: as :func:`write_html` for ``payload``.
    """
    _check_payload(payload)
    # matplotlib takes 0.7 s to import: a run with nothing to plot (one interrupted at its
    # deadline) does not wait for it.
    mpl = _matplotlib() if _anything_to_plot(payload["tests"], calibration) else None
    rows = report.run_rows(payload)
    body = "".join([
        _matrix(rows),
        _not_passed(payload["tests"]),
        _stat_table(payload["tests"]),
        _plots(payload["tests"], mpl),
        _calibration(calibration, mpl),
        _kill_matrix(mutants),
        _unavailable(payload["tests"], mpl, mutants, calibration),
    ])
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in _SECTION_HEADING.findall(body))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>DSpark conformance: {_e(payload['impl'])}</title><style>{_CSS}</style></head>"
        f"<body>{_header(payload, rows)}<nav>{nav}</nav>{body}</body></html>\n"
    )


# --------------------------------------------------------------------------- validation


def _check_payload(payload: object) -> None:
    if not isinstance(payload, dict):
        raise TypeError(f"payload: expected the results.json dict, got {type(payload).__name__}")
    missing = [key for key in _REQUIRED_KEYS if key not in payload]
    if missing:
        raise ValueError(f"payload: expected keys {list(_REQUIRED_KEYS)} (results.json), missing {missing}")
    if not isinstance(payload["tests"], list):
        raise TypeError(f"payload['tests']: expected a list of test records, got {type(payload['tests']).__name__}")
    check_int("payload['base_seed']", payload["base_seed"])
    check_float("payload['wall_s']", payload["wall_s"], minimum=0.0)


def _check_write_html(payload: object, report_dir: object) -> Path:
    _check_payload(payload)
    if not isinstance(report_dir, (str, os.PathLike)):
        raise TypeError(f"report_dir: expected a path, got {type(report_dir).__name__}")
    report_dir = Path(report_dir)
    if not report_dir.is_dir():
        raise ValueError(f"report_dir: expected an existing directory, got {str(report_dir)!r}")
    return report_dir


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


# --------------------------------------------------------------------------- helpers


def _anything_to_plot(tests: list[dict], calibration: dict | None) -> bool:
    return (any(t.get("reliability") for t in tests) or any(_has_bins(s) for _, _, s in _stat_records(tests))
            or bool(calibration and calibration["per_test"]))


def _matplotlib() -> Any:
    """The ``matplotlib`` module (Agg rendering through ``Figure``), or None without the extra."""
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401  (binds matplotlib.figure)
    except ImportError:
        return None
    return matplotlib


def _e(value: object) -> str:
    return html.escape(str(value))


def _num(value: object, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _short(nodeid: str) -> str:
    return nodeid.split("::")[-1]


def _stat_records(tests: list[dict]) -> Iterator[tuple[int, dict, dict]]:
    """``(index, test record, stat record)`` over every statistical record, in table order."""
    index = 0
    for test in tests:
        for stat in test.get("stats", []):
            yield index, test, stat
            index += 1


def _has_bins(stat: dict) -> bool:
    return bool(stat.get("observed")) and bool(stat.get("expected"))


def _is_acceptance_length(test: dict, stat: dict) -> bool:
    return test["section"] in ACCEPTANCE_SECTIONS and bool(_ACCEPTANCE_NAME.search(stat["name"]))


def _img(figure: Any, alt: str) -> str:
    """The figure as an embedded base64 PNG ``<img>``."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _new_figure(mpl: Any, width: float, height: float, layout: str | None = "constrained") -> Any:
    return mpl.figure.Figure(figsize=(width, height), layout=layout)


# --------------------------------------------------------------------------- sections


def _header(payload: dict, rows: list[report.SectionRow]) -> str:
    verdict = report.overall(rows, payload)
    coverage, *warning = report.coverage_lines(rows, payload["tests"])
    capabilities = ", ".join(payload.get("capabilities", [])) or "none"
    meta = [
        ("implementation", f"<code>{_e(payload['impl'])}</code> {_e(payload.get('description', ''))}"),
        ("device", _e(payload["device"])),
        ("base seed", _e(payload["base_seed"])),
        ("wall time", f"{float(payload['wall_s']):.1f} s"),
        *(("shards", _e(part)) for part in filter(None, [report.shard_text(payload)])),
        ("tests", str(len(payload["tests"]))),
        ("coverage", _e(coverage.removeprefix("coverage: "))
         + "".join(f"<br><strong>{_e(line)}</strong>" for line in warning)),
        *(("power", _e(line)) for line in filter(None, [report.power_line(payload)])),
        ("capabilities", _e(capabilities)),
        *(("unable to run here", _e(line.partition(": ")[2]))
          for line in filter(None, [report.cannot_run_here_line(payload)])),
        *(("notice", f"<strong>{_e(line)}</strong>") for line in report.engine_notices(payload)),
        *(("error", f"<strong>{_e(line)}</strong>") for line in report.collection_error_lines(payload)),
    ]
    items = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in meta)
    return (
        f"<h1>DSpark conformance: <code>{_e(payload['impl'])}</code> on {_e(payload['device'])} "
        f'<span class="badge big {verdict}">{verdict}</span></h1><dl class="meta">{items}</dl>'
    )


def _matrix(rows: list[report.SectionRow]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("section", "topic", "verdict", *report.OUTCOMES, "min p",
                                              "bit-identical", report.TIME_COLUMN))
    body = []
    for row in rows:
        counts = "".join(f'<td class="num">{row.counts[o]}</td>' for o in report.OUTCOMES)
        body.append(
            f"<tr><td>{_e(row.section)}</td><td>{_e(SECTION_TITLES.get(row.section, ''))}</td>"
            f'<td><span class="badge {row.verdict}">{row.verdict}</span></td>{counts}'
            f'<td class="num">{_num(row.min_p, ".2g")}</td><td class="num">{row.bit_identity}</td>'
            f'<td class="num">{row.seconds:.1f}</td></tr>'
        )
    return (f'<h2 id="matrix">Conformance matrix by SPEC section</h2><table><tr>{head}</tr>{"".join(body)}</table>'
            f'<p class="small">{_e(report.TIME_NOTE)}</p>')


def _not_passed(tests: list[dict]) -> str:
    bad = [t for t in tests if t["outcome"] in _NOT_PASSED]
    quiet = [t for t in tests if t["outcome"] not in _NOT_PASSED and t["outcome"] != "passed"]
    out = ['<h2 id="not-passed">Not passed</h2>']
    if not bad and not quiet:
        out.append("<p>Every test passed.</p>")
    for t in bad:
        summary = _summary(t["reason"])
        out.append(
            f'<h3><span class="badge {t["outcome"]}">{t["outcome"]}</span> <code>{_e(t["case"])}</code></h3>'
            f"<div>{_e(summary)}</div>"
            + "".join(f"<div>{_e(bins)}</div>" for bins in report.worst_bins(t, summary)) +
            f"<details><summary>full reason</summary><pre>{_e(t['reason'])}</pre></details>"
            f'<div class="small">replay:</div><code class="replay">{_e(t["replay"])}</code>'
        )
    if quiet:
        rows = "".join(
            f'<tr><td><span class="badge {t["outcome"]}">{t["outcome"]}</span></td><td><code>{_e(t["case"])}'
            f"</code></td><td>{_e(report.clip(t['reason']))}</td></tr>" for t in quiet
        )
        out.append(f"<h3>Skipped and expected failures</h3><table><tr><th>outcome</th><th>test</th>"
                   f"<th>reason</th></tr>{rows}</table>")
    return "".join(out)


def _summary(reason: str) -> str:
    """pytest's ``E`` lines (the assertion message), else the last line of the reason, clipped
    at a word boundary (``report.clip``)."""
    lines = [line for line in reason.strip().splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return report.clip(" ".join(errors) if errors else (lines[-1] if lines else ""))


def _named_value(value: object, spec: str, name: str) -> str:
    """A cell with the number first, so a narrow column cuts the name, never the value."""
    return f'<td title="{_e(name)}">{_num(value, spec)} <span class="small">{_e(name)}</span></td>'


def _stat_table(tests: list[dict]) -> str:
    # column -> width in % (a fixed layout keeps the table within the page; long cells end in an ellipsis)
    head = {"assertion": 22, "verdict": 6, "p-value": 6, "alpha": 4.5, "n": 5.5, "statistic": 12, "effect": 14,
            "upper bound": 5.5, "min effect": 4.5, "power": 5, "null hypothesis": 15}
    rows = []
    for index, test, s in _stat_records(tests):
        name = _e(s["name"])
        if _has_bins(s):
            name = f'<a href="#stat-{index}">{name}</a>'
        verdict = "passed" if s.get("passed") else "failed"
        rows.append(
            f'<tr><td class="wrap" title="{_e(test["case"])}">{name}</td>'
            f'<td><span class="badge {verdict}">{verdict}</span></td>'
            f'<td class="num">{_num(s.get("p_value"), ".3g")}</td><td class="num">{_num(s.get("alpha"), ".2g")}</td>'
            f'<td class="num">{_e(s.get("n", ""))}</td>'
            f'{_named_value(s.get("statistic"), ".4g", s.get("statistic_name", ""))}'
            f'{_named_value(s.get("effect"), ".3g", s.get("effect_name", ""))}'
            f'<td class="num">{_num(s.get("effect_ci_upper"), ".3g")}</td>'
            f'<td class="num">{_num(s.get("min_effect"), ".3g")}</td>'
            f'<td class="num">{_num(s.get("power_at_min_effect"), ".4f")}</td>'
            f'<td class="small" title="{_e(s.get("null", ""))}">{_e(s.get("null", ""))}</td></tr>'
        )
    if not rows:
        return '<h2 id="stats">Statistical assertions</h2><p>No statistical assertion ran.</p>'
    cols = "".join(f'<col style="width:{w}%">' for w in head.values())
    head_html = "".join(f"<th>{h}</th>" for h in head)
    return (f'<h2 id="stats">Statistical assertions</h2><p class="small">A rule passes iff p &gt; alpha; the upper '
            "bound holds with probability at least 1 - alpha; power is at the min effect. Linked names have a plot; "
            "hover a cell for its full text.</p>"
            f'<table class="stats"><colgroup>{cols}</colgroup><tr>{head_html}</tr>{"".join(rows)}</table>')


def _reliability_plot(mpl: Any, diagram: dict) -> str:
    """Observed acceptance frequency against mean predicted probability, per bin (SPEC S7)."""
    figure = _new_figure(mpl, 3.6, 3.4)
    ax = figure.add_subplot()
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect calibration")
    sizes = [20 + 200 * c / max(diagram["count"]) for c in diagram["count"]]
    ax.scatter(diagram["predicted"], diagram["observed"], s=sizes, color="#3b6fd4", label="bins (area ~ count)")
    ax.plot(diagram["predicted"], diagram["observed"], color="#3b6fd4", linewidth=1)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean predicted survival", ylabel="observed acceptance")
    ax.legend(loc="upper left", fontsize=7)
    return f'<figure>{_img(figure, diagram["name"])}<figcaption>{_e(diagram["name"])}</figcaption></figure>'


def _plots(tests: list[dict], mpl: Any) -> str:
    out = ['<h2 id="plots">Plots</h2>']
    if mpl is None and _anything_to_plot(tests, None):
        out.append(f'<p class="note">Plots need matplotlib: <code>{PLOTS_HINT}</code>. The tables above hold '
                   "every number.</p>")
        return "".join(out)
    diagrams = [d for t in tests for d in t.get("reliability", [])]
    if diagrams:
        out.append("<h3>Reliability diagrams (S7 confidence calibration)</h3>")
        out.append('<div class="grid">' + "".join(_reliability_plot(mpl, d) for d in diagrams) + "</div>")
    jobs = [(index, stat, _is_acceptance_length(test, stat), test["section"])
            for index, test, stat in _stat_records(tests) if _has_bins(stat)]
    groups: dict[tuple[bool, str], list[str]] = {}
    for (_, _, acceptance, section), figure in zip(jobs, _draw_all(mpl, [job[:3] for job in jobs])):
        groups.setdefault((acceptance, section), []).append(figure)
    titles = {False: "Observed vs expected frequencies (samplers, scheduler, sequences)",
              True: "Acceptance-length distributions vs the exact law"}
    order = {s: i for i, s in enumerate(SECTIONS)}
    for acceptance in (False, True):
        sections = sorted((s for a, s in groups if a == acceptance), key=lambda s: (order.get(s, 99), s))
        if sections:
            out.append(f"<h3>{titles[acceptance]}</h3>")
        for section in sections:
            figures = groups[(acceptance, section)]
            out.append(f'<h3 class="small">{_e(section)} {_e(SECTION_TITLES.get(section, ""))}: '
                       f'{len(figures)} plotted</h3><div class="grid">{"".join(figures)}</div>')
    if len(out) == 1:
        out.append("<p>No statistical record with observed / expected bins in this run.</p>")
    return "".join(out)


#: Fewer frequency plots than this are drawn in this process: a pool's start costs more.
_POOL_FROM = 8


def _draw_all(mpl: Any, jobs: list[tuple[int, dict, bool]]) -> list[str]:
    """``_frequency_plot`` of each ``(index, stat, acceptance)``, in order. Each figure takes
    0.3-0.7 s to draw, all of them after the verdict is known (89 of them for the reference's
    GPU run: 28 s on 2 busy cores), so from :data:`_POOL_FROM` on they are drawn by a pool of
    forked processes, one per core; the figures are the same bytes either way."""
    workers = min(len(jobs), os.cpu_count() or 1)
    if len(jobs) < _POOL_FROM or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [_frequency_plot(mpl, *job) for job in jobs]
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(_frequency_plot_job, jobs, chunksize=max(1, len(jobs) // (4 * workers))))


def _frequency_plot_job(job: tuple[int, dict, bool]) -> str:
    return _frequency_plot(_matplotlib(), *job)


def _frequency_plot(mpl: Any, index: int, stat: dict, acceptance: bool) -> str:
    figure = _frequency_figure(mpl, stat, acceptance)
    verdict = "passed" if stat.get("passed") else "FAILED"
    caption = (f"<b>{_e(stat['name'])}</b>: {verdict}, p = {_num(stat.get('p_value'), '.3g')}, "
               f"{_e(stat.get('effect_name', 'effect'))} = {_num(stat.get('effect'), '.3g')}, n = {_e(stat.get('n'))}, "
               f"{len(stat['observed'])} bins tested")
    css = "" if stat.get("passed") else ' class="fail"'
    return f'<figure id="stat-{index}"{css}>{_img(figure, stat["name"])}<figcaption>{caption}</figcaption></figure>'


def _bin_labels(name: str, bins: int, acceptance: bool) -> tuple[list[str] | None, str]:
    """Acceptance lengths 1..max_len when the case id names max_len (``max6``, or ``gamma5``
    with max_len = gamma + 1) and no bin was pooled; otherwise plain bin numbers."""
    match = _MAX_LEN.search(name) if acceptance else None
    if match:
        max_len = int(match.group(1)) if match.group(1) else int(match.group(2)) + 1
        if max_len == bins:
            return [str(k) for k in range(1, bins + 1)], "acceptance length"
    if bins > _MANY_BINS:
        return None, "bin (sparse bins pooled)"
    return [str(k) for k in range(bins)], "bin (sparse bins pooled)"


def _frequency_figure(mpl: Any, stat: dict, acceptance: bool) -> Any:
    """Observed bars against the expectation with its 95% band under H0, and the Pearson
    residuals ``(O - E) / sqrt(E)``; acceptance-length laws as probability mass."""
    observed = np.asarray(stat["observed"], dtype=np.float64)
    expected = np.asarray(stat["expected"], dtype=np.float64)
    n = observed.sum()
    scale = 1.0 / n if acceptance and n > 0 else 1.0
    band = 1.96 * np.sqrt(np.clip(expected * (1 - expected / max(n, 1.0)), 0.0, None))  # binomial sd per bin
    residual = (observed - expected) / np.sqrt(np.where(expected > 0, expected, 1.0))
    labels, xlabel = _bin_labels(stat["name"], observed.size, acceptance)
    x = np.arange(observed.size)
    colour = "#4a7bd0" if stat.get("passed") else "#d04a4a"
    with mpl.rc_context({"font.size": 8}):
        figure = _new_figure(mpl, 4.6, 3.2, layout=None)  # fixed margins: a layout engine triples the time
        figure.subplots_adjust(left=0.15, right=0.98, top=0.91, bottom=0.14, hspace=0.1)
        top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(3, 1))
        top.bar(x, observed * scale, width=0.8, color=colour, alpha=0.8, label="observed")
        style = {"fmt": "_", "markersize": 9 if observed.size <= _MANY_BINS else 3, "elinewidth": 1}
        top.errorbar(x, expected * scale, yerr=band * scale, color="black",
                     label="exact law (95% band)" if acceptance else "expected (95% band)", **style)
        top.set_ylabel("probability" if acceptance else "count")
        top.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False, borderaxespad=0.2)
        bottom.bar(x, residual, width=0.8, color=colour, alpha=0.8)
        for level in (-2, 0, 2):
            bottom.axhline(level, color="grey", linewidth=0.6, linestyle="-" if level == 0 else "--")
        bottom.set_ylabel(r"$(O-E)/\sqrt{E}$")
        bottom.set_xlabel(xlabel)
        if labels is not None:
            bottom.set_xticks(x, labels)
    return figure


def _calibration(cal: dict | None, mpl: Any) -> str:
    if cal is None:
        return ""
    out = [
        '<h2 id="calibration">Calibration of the statistical tests</h2>',
        f"<p>{cal['failed_runs']} of {cal['runs']} reference runs false-failed; upper end of the 95% "
        f"Clopper-Pearson interval of the whole-run false-failure rate {_num(cal['run_rate_upper95'], '.3g')} "
        f"against the family-wise budget {_num(cal['budget'], 'g')}.</p>",
    ]
    if cal.get("declared_power"):
        worst = min(r["power_lower95"] for r in cal["declared_power"].values())
        out.append(f"<p>Power at the declared effect, replayed: {len(cal['declared_power'])} assertions, "
                   f"smallest lower end of the 95% interval {_num(worst, '.4f')}.</p>")
    if mpl is not None and cal["per_test"]:
        out.append(f'<figure class="wide">{_img(_false_failure_figure(mpl, cal), "false failures")}'
                   "<figcaption>False failures per statistical test on the reference (observed rate and its "
                   "95% upper bound) and the one-sided KS distance D+ of its p-values below U(0, 1) "
                   "(no bar: fewer than 5 p-values).</figcaption></figure>")
    rows = "".join(
        f"<tr><td><code>{_e(_short(n))}</code></td><td class='num'>{r['runs']}</td>"
        f"<td class='num'>{r['false_failures']}</td><td class='num'>{_num(r['rate_upper95'], '.3g')}</td>"
        f"<td class='num'>{_num(r['pvalue_ks'], '.3f')}</td></tr>" for n, r in cal["per_test"].items()
    )
    out.append(f"<details{'' if mpl is not None else ' open'}><summary>false failures per test (table)</summary>"
               "<table><tr><th>test</th><th>runs</th><th>false failures</th><th>95% upper bound</th>"
               f"<th>KS D+ of p-values</th></tr>{rows}</table></details>")
    if mpl is not None and cal.get("power_any_killer"):
        out.append(f'<figure class="wide">{_img(_power_figure(mpl, cal), "power on mutants")}'
                   "<figcaption>Observed power on each mutant with statistical killers (the statistical tests "
                   "that fail it at the default seed): fraction of power seeds on which at least one failed it, "
                   "and its 95% lower bound; mutants caught only by exact tests are left out.</figcaption></figure>")
    return "".join(out)


def _false_failure_figure(mpl: Any, cal: dict) -> Any:
    names = [_short(n) for n in cal["per_test"]]
    rows = list(cal["per_test"].values())
    y = np.arange(len(rows))
    with mpl.rc_context({"font.size": 8}):
        figure = _new_figure(mpl, 11, 1.0 + 0.2 * len(rows))
        left, right = figure.subplots(1, 2, sharey=True, width_ratios=(2, 1))
        left.barh(y, [r["rate_upper95"] for r in rows], color="#c9d6ee", label="95% upper bound")
        left.plot([r["false_failures"] / max(r["runs"], 1) for r in rows], y, "o", color="#1d4fa0",
                  label="observed rate")
        left.axvline(cal["budget"], color="#c62828", linestyle="--", label=f"family-wise budget {cal['budget']:g}")
        left.set_yticks(y, names)
        left.invert_yaxis()
        left.set_xlabel("false-failure rate")
        left.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, frameon=False)
        right.barh(y, [r["pvalue_ks"] or 0.0 for r in rows], color="#8fb98f")
        right.set_xlabel("one-sided KS distance D+ of p-values below U(0, 1)")
    return figure


def _power_figure(mpl: Any, cal: dict) -> Any:
    best = cal["power_any_killer"]
    y = np.arange(len(best))
    with mpl.rc_context({"font.size": 8}):
        figure = _new_figure(mpl, 8, 1.0 + 0.22 * max(len(best), 1))
        ax = figure.subplots()
        ax.barh(y, [r["killed"] / max(r["seeds"], 1) for r in best.values()], color="#c9e3c9", label="observed power")
        ax.plot([r["power_lower95"] for r in best.values()], y, "o", color="#2e8540", label="95% lower bound")
        ax.set_yticks(y, list(best))
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel("fraction of seeds on which the test failed")
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False)
    return figure


def _kill_matrix(mutants: list[dict] | None) -> str:
    if mutants is None:
        return ""
    killed = sum(m["killed"] for m in mutants)
    head = "".join(f"<th>{s}</th>" for s in ("mutant", *SECTIONS, "fault", "mirrors", "killed by", "evidence"))
    rows = []
    for m in mutants:
        cells = "".join(_kill_cell(m) if s == m["section"] else "<td></td>" for s in SECTIONS)
        first = m["killers"][0] if m["killers"] else {"test": m.get("error") or "-", "evidence": ""}
        more = f" (+{len(m['killers']) - 1} more)" if len(m["killers"]) > 1 else ""
        rows.append(f"<tr><td><code>{_e(m['id'])}</code></td>{cells}<td class='text'>{_e(m['fault'])}</td>"
                    f"<td class='text'>{_e(m.get('mirrors') or '-')}</td>"
                    f"<td class='killer'><code>{_e(_short(first['test']))}</code>{more}</td>"
                    f"<td class='small'>{_e(first['evidence'])}</td></tr>")
    return (f'<h2 id="mutants">Mutant kill matrix</h2><p>{killed} of {len(mutants)} mutants killed; a cell '
            f"marks the mutant's SPEC section and counts the tests that failed against it.</p>"
            f'<div class="scroll"><table><tr>{head}</tr>{"".join(rows)}</table></div>')


def _kill_cell(mutant: dict) -> str:
    """The cell in the mutant's section column: a tick and the number of killing tests, or a cross."""
    if mutant["killed"]:
        return f'<td class="killed">&#10003; {len(mutant["killers"])}</td>'
    return '<td class="survived">&#10007;</td>'


def _unavailable(tests: list[dict], mpl: Any, mutants: list | None, cal: dict | None) -> str:
    """Plots the data cannot support, each with the reason (nothing is invented)."""
    notes = []
    if mpl is None and _anything_to_plot(tests, cal):
        notes.append(("every plot", f"matplotlib is not installed: <code>{PLOTS_HINT}</code>"))
    s7 = [t for t in tests if t["section"] == "S7"]
    if not any(t.get("reliability") for t in s7):
        ran = sum(t["outcome"] != "skipped" for t in s7)
        skipped = f" ({len(s7) - ran} skipped)" if s7 else ""
        why = (f"{ran} S7 case{'' if ran == 1 else 's'} ran{skipped}, but none records per-bin confidence against "
               "observed acceptance (they check confidences against a float64 oracle and STS by its ECE, with no "
               "statistical record)"
               if ran else f"no S7 case ran in this run{skipped}")
        notes.append(("reliability diagram (S7)", why))
    if not any(t["section"] == "S8" and any(_has_bins(s) for s in t.get("stats", [])) for t in tests):
        notes.append(("scheduler (S8)", "no S8 statistical record with observed / expected bins in this run"))
    if not any(_has_bins(s) and _is_acceptance_length(t, s) for _, t, s in _stat_records(tests)):
        notes.append(("acceptance-length laws (S5/S6/S9)", "no acceptance-length record with bins in this run"))
    for _, test, stat in _stat_records(tests):
        if not _has_bins(stat):
            notes.append((f"<code>{_e(stat['name'])}</code>",
                          f"{_e(stat.get('statistic_name', 'this test'))}: one statistic, no frequency vector "
                          "(see the statistical table)"))
    if cal is None:
        notes.append(("calibration", "no calibration.json here (<code>dspark-conformance calibrate --report "
                      "DIR</code>)"))
    if mutants is None:
        notes.append(("mutant kill matrix", "no mutants.json here (<code>dspark-conformance mutants --report "
                      "DIR</code>)"))
    items = "".join(f"<li><b>{what}</b>: {why}</li>" for what, why in notes)
    return f'<h2 id="unavailable">Plots not drawn</h2><ul>{items or "<li>none</li>"}</ul>'
