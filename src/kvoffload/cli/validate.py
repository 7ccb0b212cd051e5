"""``kvoffload validate``: predictions beside published measurements, by role, table and engine."""

from __future__ import annotations

import argparse

from kvoffload.cli.output import print_json


def validate(args: argparse.Namespace) -> int:
    """Print every validation row and the error summaries, or all of it as JSON."""
    from kvoffload.studies import context_growth, sweeps, validation

    results = validation.run()
    found = sweeps.sweeps(results)
    grown = context_growth.growths(results)
    summary = validation.summary(results)
    tables = validation.table_summary(results)
    roles = validation.role_summary(results)
    meta = validation.tables()
    if args.json:
        rows = [
            {"id": r.row["id"], "role": validation.role(r.row), "table": r.row["table"],
             "engine": r.row["engine"], "model": r.row["model"], "system": r.row["system"],
             "metric": r.row["metric"], "measured": r.row["measured"], "predicted": r.predicted,
             "ratio": r.ratio, "refused": r.refusal, "source": r.row["source"],
             "source_version": validation.cite(r.row)}
            for r in results
        ]  # fmt: skip
        per_table = {name: {**meta[name], **stats} for name, stats in tables.items()}
        print_json(
            {"rows": rows, "roles": roles, "tables": per_table, "summary": summary,
             "sweeps": sweeps.to_json(found), "context_growth": context_growth.to_json(grown)}
        )  # fmt: skip
        return 0
    heading = {
        "calibration": "calibration rows: a constant was set, or the model was built, while looking at them",
        "check": "check rows: never looked at before the model was frozen",
    }
    for role in validation.ROLES:
        group = [r for r in results if validation.role(r.row) == role]
        print(f"== {heading[role]} ({len(group)} rows)")
        for name, t in meta.items():
            if t["role"] != role:
                continue
            print(f"table {name}: {t['title']}; {role} since {t['since']}: {t['why']}")
            if "moved" in t:
                m = t["moved"]
                print(f"  moved from {m['from']} on {m['when']}: {m['why']}")
        print(
            f"{'row':<12} {'engine':<15} {'model':<12} {'measured':>10} {'predicted':>10} {'ratio':>6}"
        )
        for r in group:
            pred = "refused" if r.predicted is None else f"{r.predicted:.4g}"
            ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
            print(
                f"{r.row['id']:<12} {r.row['engine']:<15} {r.row['model']:<12} "
                f"{r.row['measured']:>10.4g} {pred:>10} {ratio:>6}"
            )
            if r.refusal:
                print(f"    refused: {r.refusal}")
            print(f"    source: {validation.cite(r.row)}")
        print()
    lines = [
        *((f"{role} rows", s) for role, s in roles.items()),
        *((f"table {t}", s) for t, s in tables.items()),
        *((f"engine {e}" if e != "all" else "all rows", s) for e, s in summary.items()),
    ]
    for name, s in lines:
        median = "n/a" if s["median_abs_rel_error"] is None else f"{s['median_abs_rel_error']:.1%}"
        refused = f", {s['refused']} refused" if s["refused"] else ""
        print(
            f"{name}: {s['rows']} row{'s' * (s['rows'] != 1)}{refused}, median |error| {median}, within 2x {s['within_2x']:.0%}"
        )
    _print_sweeps(found)
    _print_growth(grown)
    return 0


def _print_growth(grown) -> None:
    """Print each decode row's growth with context over its configuration's shortest prompt."""
    from kvoffload.studies import context_growth as cg

    print()
    print(
        f"== decode's growth with context: each row over its configuration's shortest prompt "
        f"(target: predicted within {cg.TARGET:.0%} of measured; not judged where the "
        f"figures' rounding alone could move the growth by {cg.TARGET:.0%})"
    )
    for g in grown:
        pred = "refused" if g.predicted_ms is None else f"{g.predicted_ms:+.3g} ms"
        verdict = {None: "not judged", True: "within", False: "outside"}[g.within]
        ratio = "" if g.ratio is None else f", ratio {g.ratio:.2f}"
        print(
            f"{g.row.row['id']} over {g.base.row['id']} ({g.row.row['table']}, "
            f"{g.base.row['prompt']} -> {g.row.row['prompt']} tokens): measured "
            f"{g.measured_ms:+.3g} ms, predicted {pred}{ratio}: {verdict}"
        )
    judged = [g for g in grown if g.within is not None]
    print(f"{len(grown)} rows, {len(judged)} judged, {sum(bool(g.within) for g in judged)} within")


def _print_sweeps(found) -> None:
    """Print each published sweep's ranking: Kendall's tau and the pick's measured share."""
    from kvoffload.studies import sweeps

    print()
    print(
        f"== sweeps: one machine, model and workload, {sweeps.MIN_ROWS}+ configurations measured; "
        f"does the predicted order match (target tau >= {sweeps.TAU_TARGET:g}, the pick within "
        f"{sweeps.PICK_WITHIN:.0%} of the fastest measured)?"
    )
    for s in found:
        tau = "n/a" if s.tau is None else f"{s.tau:+.2f}"
        share = "n/a" if s.pick_share is None else f"{s.pick_share:.0%}"
        order = " > ".join(r.row["id"] for r in s.ranked)
        print(
            f"{s.table} {s.model} on {s.system}: tau {tau}, pick {s.pick.row['id'] if s.pick else '-'} "
            f"at {share} of the fastest ({s.fastest.row['id']}); predicted order {order}"
        )
    pooled = sweeps.pooled_tau(found)
    met = sweeps.meeting(found)
    print(
        f"{len(found)} sweeps, {met} meeting both targets; tau over all their pairs "
        f"{'n/a' if pooled is None else f'{pooled:+.2f}'}"
    )
