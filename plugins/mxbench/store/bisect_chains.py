"""Which DAG runs belong to a bisect chain, as the results store keeps it.

A chain is minted by its first DAG run (a person's) or by the regression DAG run that starts it:
an unguessable id and the digest of the params its next DAG run must carry. Each decided DAG run
replaces that digest with the next one's in one compare-and-set, so a DAG run that claims a chain
with params of its own (a trigger user's, a stale one's) is refused, and two DAG runs with the same
params cannot both move the chain on. The DAG run that moved it on may retry its decide and hand
the same on again (``last_decider``). Run ids come from a salt the chain never shows
(``run_id_for``): a retry names the same DAG run, nobody else can guess it. What the digest
covers: ``params_digest``.
"""
import hashlib
import json
import secrets
from typing import List, Mapping, Optional, Tuple

import sqlalchemy as sa

from mxbench.store.database import ready_engine
from mxbench.store.schema import bisect_chains, utcnow
from mxbench.store.store_errors import StoreError


class ChainRefused(StoreError):
    """A DAG run that claims a bisect chain it does not belong to, or would move one on twice."""


def params_digest(params: Mapping) -> str:
    """sha256 of the params as canonical JSON: every knob of the measurement and the chain's state
    (probe, earlier DAG runs), so that none can be changed by whoever triggers a probe."""
    return hashlib.sha256(json.dumps(dict(params), sort_keys=True, separators=(",", ":"), default=str)
                          .encode()).hexdigest()


def start_chain(url: str, *, dag_id: str, starter: Tuple[str, str], variant: str, launcher: str, good_build: str,
                bad_build: str, first_params: Mapping, starter_kind: str = "manual") -> str:
    """A new chain of ``dag_id``, minted by ``starter`` (DAG id, run id) of run type
    ``starter_kind``, whose first DAG run carries ``first_params``; its id."""
    chain_id, now = secrets.token_hex(16), utcnow()
    with ready_engine(url).begin() as connection:
        connection.execute(bisect_chains.insert().values(
            chain_id=chain_id, dag_id=dag_id, starter_dag=starter[0], starter_run=starter[1], variant=variant,
            launcher=launcher, good_build=good_build, bad_build=bad_build, starter_kind=starter_kind,
            salt=secrets.token_hex(16), decided=0, expected_params=params_digest(first_params), claimed=False,
            answered=False, created_at=now, updated_at=now))
    return chain_id


def run_id_for(row: Mapping, prefix: str, step: int) -> str:
    """The run id of the chain's DAG run number ``step`` (0: its first): ``prefix`` and 8 hex
    digits from the chain's salt, the same on every retry, guessable by nobody."""
    secret = f"{row['salt']}/{step}".encode()
    return f"{prefix}__{hashlib.sha256(secret).hexdigest()[:8]}"


def chain(url: str, chain_id: str) -> Optional[dict]:
    with ready_engine(url).connect() as connection:
        row = connection.execute(sa.select(bisect_chains).where(bisect_chains.c.chain_id == chain_id)).first()
    return dict(row._mapping) if row else None


def chain_started_by(url: str, dag_id: str, starter: Tuple[str, str]) -> Optional[dict]:
    """The chain of ``dag_id`` that ``starter`` (DAG id, run id) minted, if any."""
    c = bisect_chains.c
    with ready_engine(url).connect() as connection:
        row = connection.execute(sa.select(bisect_chains).where(
            (c.dag_id == dag_id) & (c.starter_dag == starter[0]) & (c.starter_run == starter[1]))).first()
    return dict(row._mapping) if row else None


def chains_over(url: str, dag_id: str, starter_dag: str, variant: str, launcher: str, good_build: str,
                bad_build: str) -> List[dict]:
    """The chains of ``dag_id`` over one range that DAG runs of ``starter_dag`` minted, oldest first."""
    c = bisect_chains.c
    with ready_engine(url).connect() as connection:
        rows = connection.execute(sa.select(bisect_chains).where(
            (c.dag_id == dag_id) & (c.starter_dag == starter_dag) & (c.variant == variant) & (c.launcher == launcher)
            & (c.good_build == good_build) & (c.bad_build == bad_build)).order_by(c.created_at)).all()
    return [dict(row._mapping) for row in rows]


# the run types of the regression DAG's own DAG runs, whose chains stand for their range
NIGHTLY_KINDS = ("scheduled", "backfill")


def starter_kind(run_type, conf: Optional[Mapping]) -> str:
    """What a chain records of the DAG run that starts it: its run type (Airflow's enum or its
    value), marked "with conf" where a trigger user set the DAG run's conf: a backfill can be
    created with a conf (or reprocess a scheduled DAG run with one), and its settings are theirs."""
    kind = str(getattr(run_type, "value", run_type) or "manual")
    return f"{kind} with conf" if conf and kind in NIGHTLY_KINDS else kind


def blocks_range(row: Mapping) -> bool:
    """Whether a chain stands for its range, so that no other is started over it: one the regression
    DAG's own DAG runs started (``NIGHTLY_KINDS``, no conf of a trigger user's) that began and is
    still going, or ended naming the first bad build. One whose first DAG run never began (its
    trigger failed) or that ended without an answer does not."""
    return row["starter_kind"] in NIGHTLY_KINDS and (
        bool(row["answered"]) or (bool(row["claimed"]) and row["expected_params"] is not None))


def advance_chain(url: str, chain_id: str, run_id: str, params: Mapping, next_params: Optional[Mapping],
                  answered: bool = False) -> bool:
    """Move the chain on from DAG run ``run_id``, which carries ``params``, to the one that will
    carry ``next_params`` (None: the chain is done; ``answered``: naming the first bad build). True
    too when ``run_id`` already moved it on so (a retry of its decide). False when the chain
    does not expect ``params`` (not its DAG run, or another one with the same params decided
    first): nothing changes."""
    c, digest = bisect_chains.c, params_digest(params)
    following = params_digest(next_params) if next_params is not None else None
    with ready_engine(url).begin() as connection:
        moved = connection.execute(bisect_chains.update().where(
            (c.chain_id == chain_id) & (c.expected_params == digest)).values(
            decided=c.decided + 1, updated_at=utcnow(), expected_params=following, answered=answered,
            last_decider=run_id, last_params=digest))
        if moved.rowcount == 1:
            return True
        again = connection.execute(sa.select(c.chain_id).where(
            (c.chain_id == chain_id) & (c.last_decider == run_id) & (c.last_params == digest)
            & (c.expected_params == following if following is not None else c.expected_params.is_(None)))).first()
    return again is not None


def claim(url: str, dag_id: str, run_id: str, chain_id: str, params: Mapping) -> dict:
    """The chain this DAG run of ``dag_id`` belongs to (its row). ``chain_id``: the one its conf
    names, "" for none; ``params``: the rest of the bisect's params. Without a chain id, this DAG
    run starts a chain (once: a retry finds its own) and must carry none of a chain's state; with
    one, the chain must expect exactly these params, or have been moved on from them by this same
    DAG run (a retry). ``ChainRefused`` otherwise, saying why."""
    if not chain_id:
        if params.get("probe_build") or params.get("bisect_runs"):
            raise ChainRefused("probe_build and bisect_runs are a bisect chain's own state, handed on by the "
                               "chain with its bisect_chain id: leave all three empty to start a bisect")
        own = chain_started_by(url, dag_id, (dag_id, run_id))
        chain_id = own["chain_id"] if own else start_chain(
            url, dag_id=dag_id, starter=(dag_id, run_id), variant=params["only_variants"][0],
            launcher=params["launchers"][0], good_build=params["good_build"], bad_build=params["bad_build"],
            first_params=params)
    row = chain(url, chain_id)
    if row is None or row["dag_id"] != dag_id:
        raise ChainRefused(f"bisect chain {chain_id!r} is not one of {dag_id}'s in the results store")
    digest = params_digest(params)
    if row["expected_params"] == digest:
        if not row["claimed"]:
            with ready_engine(url).begin() as connection:
                connection.execute(bisect_chains.update().where(bisect_chains.c.chain_id == chain_id).values(
                    claimed=True, updated_at=utcnow()))
        return row
    if row["last_decider"] == run_id and row["last_params"] == digest:
        return row  # this DAG run moved the chain on: a retry, which hands the same on again
    state = "it is done" if row["expected_params"] is None else f"{row['decided']} DAG runs decided so far"
    raise ChainRefused(f"bisect chain {chain_id} did not hand this DAG run these params ({state}): only the chain "
                       "triggers its probes, with the params its last DAG run decided on")
