"""Steps and phases from the names people give their ranges: one declared table.

Both readers (nsys exports and torch.profiler traces) hand their ranges to the
same attribution, so one table serves both. Each row says which kind of label
it gives (`step` or `phase`), the phase, its pattern, and a range name it
matches, taken from a real profile where `source` names the corpus file.

Built-in patterns are written in a folded notation and matched on the whole
name, ignoring case and separators:

* a space in a pattern stands for any run of separators (space, `_`, `-`,
  `.`) or none, so `forward pass` matches `forward pass`, `Forward-Pass`,
  `forward_pass` and `ForwardPass`;
* `#` and spaces around the name are ignored, so `## forward ##` (the
  annotations PyTorch's DDP and torchrec write) is `forward`.

A step rule's first capture group is the step number. User rules (`--step
REGEX`, `--phase NAME=REGEX`) are regular expressions searched anywhere in the
name as written (`^...$` anchors, `(?i)` ignores case) and are checked before
the built-in rows; a name that any user rule matches takes its step, phase and
warm-up mark from the user's rules alone, so a user rule always wins over the
built-in reading of that name. The rules travel as a `NameRules` value into
attribution; nothing here is global state.

Warm-up is not a phase but a mark beside it: the `warmup` rows (and a user's
`--phase warmup=REGEX`) say which ranges hold work done before measurement.
An operation inside a warm-up range keeps the step and phase of the ranges
around it (a warm-up step's forward and backward are phases `forward` and
`backward`) and gets `warmup` true in ops.parquet, so that summaries can leave
it out of per-step figures. A name may carry both, as PARAM's benchmark
annotations do: `[param|<model>|...|warmup|forward]` is a forward pass inside
the warm-up (phase `forward`, warm-up), `[...|measure|forward]` a measured one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from instrument.phase_vocabulary import PHASES
from nsysmap.core.errors import ExitCode, NsysmapError

WARMUP = "warmup"  # the `phase` of the warm-up rows: a mark beside the phase, not a phase
PHASE_NAMES = (*PHASES, WARMUP)  # what `--phase NAME=REGEX` accepts
KINDS = ("step", "phase")
SEPARATORS = r"[\s_.\-]*"
# Files of ../shared/corpus the examples come from.
_CS336 = "real/cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite"
_DDP = "real/hta_ddp_ns_resolution_rank0_v100.json.gz"
_RECSYS = "real/hta_recsys_shapes_rank0_a100.json.gz"
_PARAM = "real2/hta_param_alexnet_warmup_measure_annotations_a100.json.gz"
# PARAM benchmark annotations: a bracketed path with `|` (or `/`) between its parts.
_PARAM_PATH = r"\[param[|/][^\]]*[|/]"


class BadNameRule(NsysmapError):
    """A `--step` or `--phase` option that is not a usable rule."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class NameRule:
    """One row of the table: a name pattern and the step or phase it gives."""

    kind: str  # "step" (capture group 1 is the number) or "phase"
    phase: str | None  # the phase of a phase rule; None for a step rule
    pattern: str  # built-in: folded notation (module docstring); user: a regex as given
    example: str  # a range name the rule matches
    source: str | None = None  # the corpus file `example` comes from, when real
    user: bool = False

    @property
    def regex(self) -> str:
        """The pattern as one regular expression on the raw name (no flags outside it)."""
        if self.user:
            return f"(?:{self.pattern})"
        body = self.pattern.replace(" ", SEPARATORS)
        return rf"(?i:^[#\s]*(?:{body})[#\s]*$)"


def _phase(phase: str, pattern: str, example: str, source: str | None = None) -> NameRule:
    return NameRule("phase", phase, pattern, example, source)


def _step(pattern: str, example: str, source: str | None = None) -> NameRule:
    return NameRule("step", None, pattern, example, source)


# Checked top to bottom within each kind; the first match gives the label.
RULES: tuple[NameRule, ...] = (
    _step(r"profiler step#(\d+)", "ProfilerStep#101", _DDP),
    _step(r"(?:train |training )?step [#:=]? (\d+)", "train_step 7"),
    _step(r"(?:train |training )?(?:iteration|iter) [#:=]? (\d+)", "iteration 5"),
    _phase(
        WARMUP,
        r"warm up(?: (?:steps?|iters?|iterations?|runs?|phase))?(?: [#:=]? \d+)?",
        "Warm-up Step 3",
    ),
    _phase(
        WARMUP,
        rf"{_PARAM_PATH}warm up(?:[|/][^\]]*)?\]",
        "[param|pytorch.model.alex_net|0|0|0|warmup|forward]",
        _PARAM,
    ),
    _phase("zero_grad", r"(?:optimizer |model )?zero grad", "## zero_grad ##", _RECSYS),
    _phase("zero_grad", r"optimizer zero grad#.*", "Optimizer.zero_grad#SGD.zero_grad", _DDP),
    _phase("optimizer", r"optimizer(?: step)?|optim|opt step", "## optimizer ##", _DDP),
    _phase("optimizer", r"optimizer step#.*", "Optimizer.step#SGD.step", _DDP),
    _phase("backward", r"(?:loss )?backward(?: pass)?|bwd", "backward pass", _CS336),
    _phase(
        "forward",
        r"(?:model |ddp |fsdp |distributed data parallel |fully sharded data parallel )?"
        r"forward(?: pass)?|fwd",
        "DistributedDataParallel.forward",
        _DDP,
    ),
    _phase(
        "forward",
        rf"{_PARAM_PATH}forward\]",
        "[param|pytorch.model.alex_net|0|0|0|measure|forward]",
        _PARAM,
    ),
    _phase("backward", rf"{_PARAM_PATH}backward\]", "[param|my_model|0|0|0|measure|backward]"),
    _phase("loss", r"loss|compute loss|loss fn|criterion", "loss", _CS336),
    _phase(
        "data",
        r"data|data load(?:ing|er)?|get batch|next batch|enumerate\(dataloader\)#.*",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    ),
    # TorchRec's training pipeline: the batch's copy to the GPU and the all-to-all
    # that sends each rank the sparse features of its embedding shards
    _phase("data", r"copy batch to gpu|sparse data dist", "## copy_batch_to_gpu ##", _RECSYS),
)


@dataclass(frozen=True)
class NameRules:
    """The rules attribution applies: user rows first, then the built-in table."""

    rules: tuple[NameRule, ...] = RULES
    step_options: tuple[str, ...] = ()  # the user's --step values, as typed
    phase_options: tuple[str, ...] = ()  # the user's --phase values, as typed

    def of_kind(self, kind: str) -> tuple[NameRule, ...]:
        return tuple(rule for rule in self.rules if rule.kind == kind)

    def any_regex(self) -> str:
        """One expression every step or phase name of these rules matches."""
        return "|".join(rule.regex for rule in self.rules)

    def step_expr(self, name: pl.Expr) -> pl.Expr:
        """The step number a name gives (Int64, null when none or not an integer)."""
        return self._users_first(name, lambda rules: _step_expr(rules, name))

    def phase_expr(self, name: pl.Expr) -> pl.Expr:
        """The phase a name gives (the first matching rule), null when none.

        Never `warmup`: the warm-up rows give `warmup_expr` instead.
        """
        return self._users_first(name, lambda rules: _phase_expr(rules, name))

    def warmup_expr(self, name: pl.Expr) -> pl.Expr:
        """True for a name that marks warm-up work, else False."""
        return self._users_first(name, lambda rules: _warmup_expr(rules, name))

    def _users_first(self, name: pl.Expr, expr: Callable[[Sequence[NameRule]], pl.Expr]) -> pl.Expr:
        """`expr` of the user's rules for names one of them matches, else of the built-in rows."""
        users = [rule for rule in self.rules if rule.user]
        builtin = [rule for rule in self.rules if not rule.user]
        if not users:
            return expr(builtin)
        matched = name.str.contains("|".join(rule.regex for rule in users)).fill_null(False)
        return pl.when(matched).then(expr(users)).otherwise(expr(builtin))

    def options(self) -> dict[str, Any]:
        """The user's rules as manifest.json records them (empty without any)."""
        given = {"step_rules": self.step_options, "phase_rules": self.phase_options}
        return {key: list(value) for key, value in given.items() if value}


BUILTIN = NameRules()


def _step_expr(rules: Sequence[NameRule], name: pl.Expr) -> pl.Expr:
    numbers = [
        name.str.extract(rule.regex, 1).cast(pl.Int64, strict=False)
        for rule in rules
        if rule.kind == "step"
    ]
    return pl.coalesce(numbers) if numbers else pl.lit(None, pl.Int64)


def _phase_expr(rules: Sequence[NameRule], name: pl.Expr) -> pl.Expr:
    expr = pl.lit(None, dtype=pl.String)
    for rule in reversed([r for r in rules if r.kind == "phase" and r.phase != WARMUP]):
        expr = pl.when(name.str.contains(rule.regex)).then(pl.lit(rule.phase)).otherwise(expr)
    return expr


def _warmup_expr(rules: Sequence[NameRule], name: pl.Expr) -> pl.Expr:
    marks = [rule.regex for rule in rules if rule.phase == WARMUP]
    if not marks:
        return pl.lit(False)
    return name.str.contains("|".join(marks)).fill_null(False)


def user_rules(steps: Sequence[str] = (), phases: Sequence[str] = ()) -> NameRules:
    """The built-in table with the user's `--step REGEX` / `--phase NAME=REGEX` rules first.

    Raises BadNameRule (exit code 2) for an invalid regex, a step regex
    without a capture group, or an unknown phase name.
    """
    rows = [_user_step(pattern) for pattern in steps]
    rows += [_user_phase(option) for option in phases]
    return NameRules((*rows, *RULES), tuple(steps), tuple(phases))


def _user_step(pattern: str) -> NameRule:
    groups = _checked(pattern, f"--step {_shown(pattern)}")
    if groups < 1:
        raise BadNameRule(
            f"--step {_shown(pattern)}: put the step number in a capture group, "
            "e.g. 'epoch \\d+ (\\d+)'"
        )
    return NameRule("step", None, pattern, "", user=True)


def _user_phase(option: str) -> NameRule:
    phase, sep, pattern = option.partition("=")
    phase = phase.strip()
    if not sep or not pattern:
        raise BadNameRule(f"--phase {_shown(option)}: expected NAME=REGEX, e.g. forward='^fwd_'")
    if phase not in PHASE_NAMES:
        raise BadNameRule(
            f"--phase {_shown(option)}: unknown phase {phase!r}; "
            f"expected one of {', '.join(PHASE_NAMES)}"
        )
    _checked(pattern, f"--phase {_shown(option)}")
    return NameRule("phase", phase, pattern, "", user=True)


def _shown(text: str) -> str:
    """An option's value in quotes, on one line."""
    return "'" + text.replace("\n", "\\n") + "'"


def _checked(pattern: str, what: str) -> int:
    """The number of capture groups of `pattern`; BadNameRule when it does not compile."""
    try:
        groups = pl.Series([""], dtype=pl.String).str.extract_groups(pattern)
    except pl.exceptions.ComputeError as exc:
        lines = [line.strip() for line in str(exc).splitlines()]
        reason = next((line[7:] for line in lines if line.startswith("error: ")), "parse error")
        raise BadNameRule(f"{what}: not a valid regular expression ({reason})") from None
    return len(groups.struct.fields)
