"""Collection benchmark: tdscheme's RayCollector against torchrl's, and against the limits.

Everything runs in one process on one Ray (``num_cpus=2``, no dashboard); every
collector or actor is shut down after its measurement, and the next one starts
once Ray has its CPUs back. Every Ray collector gets ``{"num_cpus": 1}`` per
actor. Run from the repository root::

    .venv/bin/python benchmarks/collection.py                 # full run, a few minutes
    .venv/bin/python benchmarks/collection.py --quick         # smoke test
    .venv/bin/python benchmarks/collection.py --sections same,push --frames 20000 --out r.md
    .venv/bin/python benchmarks/collection.py --scale --out r.md  # 2-14 collectors, 16 cores

Sections (``--sections``, default all), each in the module of its family:
``collection_rates.py`` (same, batched, envpool, recommended, limits, scale),
``collection_transport.py`` (push, large), ``collection_startup.py`` (startup);
``collection_runs.py`` builds and measures one collector for all of them. This module
holds the command line and the report:

* ``same``: both RayCollectors with the same env factory, the same 2x64 MLP,
  ``frames_per_batch=1000``, 2 collectors, ``sync`` False (first-ready) and
  True (stacked), CartPole-v1 and Pendulum-v1: frames/s over ``--frames``
  frames after one warm-up batch, and seconds from construction to first batch.
* ``envpool``: tdscheme with ``make_env(..., backend="envpool")`` (EnvPool's
  C++ threads, torchrl's ``MultiThreadedEnv``), 2 workers: CartPole-v1 (64 envs
  per worker, 4096 frames per batch, the same MLP writing action indices) next
  to the ``batched`` rows (gymnasium backend, hand-written limit), and Pong-v5
  (4 stacked 84x84 frames, 16 envs per worker, 1024 frames per batch, a tiny
  linear policy); each next to the hand-written limit over EnvPool (plain
  actors stepping EnvPool with the same torch policy, numpy batches), and Pong
  also through the gymnasium backend (ale-py with EnvPool's preprocessing:
  ``AtariPreprocessing`` + 4 stacked frames, the lean path). Rows are n/a with
  the reason where EnvPool or ale-py + opencv (the ``clients`` extra) are missing.
* ``push``: pushing a ~1M-parameter MLP to 2 collectors, timed until every
  worker has the weights: the first push and the median of the next ones
  (every worker constructed and idle, before iterating), and the median of
  pushes made between batches of a running collection (a push then also waits
  for the batches the workers are collecting: one worker's for torchrl, both
  for tdscheme, whose workers prefetch the next batch).
* ``large``: 4x84x84 uint8 observations, a tiny policy (transport dominates):
  frames/s, the driver's wait for a batch that is already done, and the
  ``ray.get`` of one ready batch from an actor as a pickled TensorDict, as a
  tdscheme codec payload (decoded) and as a numpy dict.
* ``recommended``: tdscheme as we recommend it (batched envs per collector,
  large batches: the sweep is reported, the chosen configuration measured
  again) against torchrl's RayCollector set up as its docstring example
  (1 collector, 1 env, ``frames_per_batch=200``) and the same with 2 collectors.
* ``limits``: a hand-written Ray collector (plain actors, gymnasium, torch,
  numpy batches; 1 env and a vector env), the same loop in-process without
  Ray, and torchrl's single-process ``Collector`` (1 env and 8 batched envs).
* ``startup``: what a user's script waits for: a fresh Python process per run that
  builds the collector with no Ray running (each library starts its own, as it does
  for a user: tdscheme's local Ray preloads the worker modules into the processes it
  prestarts; torchrl's calls ``ray.init()``) and takes the first batch (CartPole-v1,
  2 collectors, ``frames_per_batch=1000``); construction to first batch and process
  start to first batch (imports included), the two libraries alternating, median of
  3 runs; and ``tdscheme, Ray up``: tdscheme's local Ray started first and given
  10 s for the worker processes it prestarts to import the worker modules (what
  ``tdscheme train`` arranges by starting Ray while it imports), then the same
  construction; next to it, both libraries after a user's plain ``ray.init()``
  and the same 10 s (``plain Ray up``: nothing preloaded in Ray's workers).
* ``scale`` (``--scale``, not in the default run): frames/s of tdscheme and
  torchrl with 2, 4, 8 and 14 collectors (1 CartPole env each, 1000 frames per
  batch, first-ready) on a Ray of ``os.cpu_count()`` CPUs, and each one's
  fraction of linear scaling from 2 collectors. Needs 16 cores.

Output: one JSON line per measurement on stdout, then one table per section;
``(1.83x)`` after a value is tdscheme's speedup over that row (rates:
tdscheme/row, times: row/tdscheme; >1 means tdscheme is better). ``--out``
writes the tables as a markdown section for ``benchmarks/results/`` (``collection.md``,
``collection_limits.md``); the latest figures go in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import os
import sys

from collection_rates import (
    section_batched,
    section_envpool,
    section_limits,
    section_recommended,
    section_same,
    section_scale,
)
from collection_runs import Measurement, Settings
from collection_startup import section_startup
from collection_transport import section_large, section_push
from report import Recorder, parse_section_args, run_sections

SECTIONS = (
    "same", "batched", "envpool", "startup", "push", "large", "recommended", "limits", "scale",
)  # fmt: skip
DEFAULT_SECTIONS = tuple(x for x in SECTIONS if x != "scale")  # scale: --scale, 16 cores
METRICS = {  # metric -> column title
    "frames_per_s": "frames/s",
    "first_batch_s": "construction to first batch",
    "ready_batch_wait_s": "wait for a ready batch (median)",
    "transfer_s": "ray.get of one batch (median)",
    "push_first_s": "first push",
    "push_idle_median_s": "push to idle workers (median)",
    "push_in_loop_median_s": "push between batches (median)",
    "linear_fraction": "fraction of linear scaling",
    "process_to_first_batch_s": "process start to first batch (imports, Ray start)",
}


# ---------------------------------------------------------------- report


def references(ms: list[Measurement], m: Measurement) -> dict[str, Measurement]:
    """The tdscheme measurements ``m`` is compared with, by label."""

    def find(section: str, env: str, order: str, impl: str) -> Measurement | None:
        return next(
            (
                x
                for x in ms
                if (x.section, x.env, x.order, x.metric, x.impl)
                == (section, env, order, m.metric, impl)
                and (section != "scale" or x.config == m.config)  # same number of collectors
            ),
            None,
        )

    if m.unit == "x" or (m.section == "startup" and not m.impl.startswith("torchrl")):
        return {}  # already a ratio; or a tdscheme start-up row (torchrl's rows have the ratio)
    if m.section == "startup" and m.impl == "torchrl, plain Ray up":  # both given a running Ray
        refs = {
            "tdscheme's Ray": find("startup", m.env, m.order, "tdscheme, Ray up"),
            "plain Ray": find("startup", m.env, m.order, "tdscheme, plain Ray up"),
        }
        return {k: v for k, v in refs.items() if v is not None}
    if m.section == "envpool":  # vs the gymnasium backend and the hand-written limits
        if m.impl.startswith("hand-written"):
            return {}
        refs = {
            "hand envpool": find("envpool", m.env, "first-ready", "hand-written Ray envpool"),
            "gym": find("batched", m.env, "first-ready", "tdscheme"),
            "hand gym": find("batched", m.env, "first-ready", "hand-written Ray"),
        }
        return {k: v for k, v in refs.items() if v is not None and v is not m}
    if m.section == "limits":  # one env: tdscheme's same-config row; batched: recommended
        if m.config.startswith("1 env"):
            refs = {"same": find("same", m.env, "first-ready", "tdscheme")}
        else:
            refs = {"rec.": find("recommended", m.env, "first-ready", "tdscheme")}
    else:
        impl = "tdscheme codec" if m.metric == "transfer_s" else "tdscheme"
        refs = {"": find(m.section, m.env, m.order, impl)}
        if m.section == "same" and m.impl == "torchrl":  # the user's collector_class=Collector
            refs["Collector"] = find(m.section, m.env, m.order, "tdscheme Collector")
    return {k: v for k, v in refs.items() if v is not None and v is not m}


def cell(ms: list[Measurement], m: Measurement) -> str:
    if m.value is None:
        return "n/a"
    if m.unit == "s":
        text = f"{m.value * 1e3:.3g} ms" if m.value < 1 else f"{m.value:.3g} s"
    elif m.unit == "x":
        text = f"{m.value:.2f}"
    else:
        text = f"{m.value:,.0f}"
    ratios = []
    for label, ref in references(ms, m).items():
        if ref.value:
            r = ref.value / m.value if m.unit.endswith("/s") else m.value / ref.value
            if m.section == "envpool":  # EnvPool's rate as a fraction of the reference's
                r = 1 / r
            ratios.append(f"{label} {r:.3g}x".strip())
    return f"{text} ({', '.join(ratios)})" if ratios else text


def tables(ms: list[Measurement]) -> dict[str, list[list[str]]]:
    """One table per section: a row per (env, order, impl, config), a column per metric."""
    out = {}
    for section in dict.fromkeys(m.section for m in ms):
        sm = [m for m in ms if m.section == section]
        metrics = list(dict.fromkeys(m.metric for m in sm))
        keys = dict.fromkeys((m.env, m.order, m.impl, m.config) for m in sm)
        table = [
            ["env", "order", "impl", "config"] + [METRICS.get(x, x) for x in metrics] + ["note"]
        ]
        for key in keys:
            row = [m for m in sm if (m.env, m.order, m.impl, m.config) == key]
            by_metric = {m.metric: cell(ms, m) for m in row}
            notes = "; ".join(dict.fromkeys(m.note for m in row if m.note))
            table.append([*key, *(by_metric.get(x, "") for x in metrics), notes])
        out[section] = table
    return out


TITLE = "Collection: tdscheme's RayCollector vs torchrl's RayCollector, and the limits"
INTRO = (
    'One Ray (`num_cpus=2`) for the whole run, `{"num_cpus": 1}` per collector actor; '
    "frames/s after one warm-up batch; the first batch includes construction. "
    "`(1.83x)` after a value is tdscheme's speedup over that row (rates: tdscheme/row, "
    "times: row/tdscheme; >1 means tdscheme is better); limits with one env are compared "
    "with tdscheme's same-configuration row (`same`), batched ones with its recommended "
    "row (`rec.`); EnvPool rows give their own rate over the gymnasium backend's (`gym`) "
    "and the hand-written collector's (`hand`) in the batched section. "
    "See the docstring of `benchmarks/collection.py` for what each section measures."
)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    scale = "--scale" in argv
    argv = [x for x in argv if x != "--scale"] + (["--sections", "scale"] if scale else [])
    args = parse_section_args(
        __doc__.split("\n")[0], SECTIONS, "frames measured per collector after the warm-up "
        "batch (default 20000, 2000 with --quick)", argv,
    )  # fmt: skip
    if "--sections" not in argv:
        args.sections = list(DEFAULT_SECTIONS)
    s = Settings.quick(args.frames) if args.quick else Settings(frames=args.frames or 20_000)

    def run(rec: Recorder) -> None:
        best = (s.sweep_num_envs[0], s.sweep_frames_per_batch[0])
        for section in SECTIONS:  # fixed order: limits reuse recommended's choice
            if section not in args.sections:
                continue
            if section == "recommended":
                best = section_recommended(rec, s)
            elif section == "limits":
                section_limits(rec, s, *best)
            else:
                sections = {
                    "same": section_same, "batched": section_batched,
                    "envpool": section_envpool, "startup": section_startup,
                    "push": section_push, "large": section_large, "scale": section_scale,
                }  # fmt: skip
                sections[section](rec, s)

    return run_sections(
        run, tables=tables, out=args.out, title=TITLE, script="collection.py", argv=argv,
        intro=INTRO, num_cpus=(os.cpu_count() or 2) if "scale" in args.sections else 2,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
