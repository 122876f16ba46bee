"""The rank an nsys export declares in its launch environment.

nsys records the environment of the process it launched in
`META_DATA_CAPTURE` (`PROCESS_0:ENVIRONMENT_VARIABLE` rows holding
`NAME="value"`). When every rank of a job runs under its own `nsys profile`
(`torchrun ... nsys profile python train.py`, `srun nsys profile ...`), that
environment holds the rank the launcher gave it. When nsys launched the
launcher itself (`nsys profile torchrun ...`), it does not: the ranks are then
the export's processes (see nsysmap.many).
"""

from __future__ import annotations

import polars as pl

# Variables naming the global rank and the world size, most specific first:
# torch.distributed, Open MPI, PMI/PMIx (MPICH, Slurm's PMI), Cray PALS, Slurm.
RANK_VARIABLES: tuple[str, ...]
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "PALS_RANKID")
RANK_VARIABLES += ("SLURM_PROCID",)
WORLD_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def launch_environment(frame: pl.DataFrame | None) -> dict[str, str]:
    """NAME -> value of the launched process's environment (quotes removed)."""
    if frame is None or frame.is_empty():
        return {}
    pairs = frame.select(
        name=pl.col("value").str.extract(r"^([^=]+)=", 1),
        value=pl.col("value").str.extract(r"^[^=]+=(.*)$", 1).str.strip_chars('"'),
    ).drop_nulls("name")
    return dict(pairs.unique("name", keep="first", maintain_order=True).rows())


def rank_facts(frame: pl.DataFrame | None) -> dict[str, str | None]:
    """`rank`, `world_size` and `rank_variable` from the launch environment (None: not said)."""
    env = launch_environment(frame)
    found = next((v for v in RANK_VARIABLES if _whole(env.get(v))), None)
    world = next((env[v] for v in WORLD_VARIABLES if _whole(env.get(v))), None)
    return {
        "rank": env[found] if found else None,
        "world_size": world,
        "rank_variable": found,
    }


def _whole(value: str | None) -> bool:
    return value is not None and value.isdigit()
