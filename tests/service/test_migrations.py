"""The state database's migrations (Alembic, run when a store opens) on SQLite and on a real PostgreSQL:
a new database gets the tables the store declares; a database an earlier version made, which has no
``alembic_version`` table, is brought up to them in place and keeps its state."""

from __future__ import annotations

import json
import time

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from placement.model.cluster import build_cluster
from placement.model.snapshot import ClusterSnapshot
from service.codec import cluster_to_json
from service.cycle import run_cycle
from service.store import Replace
from service.store.codec import placed_row
from service.store.schema import alembic_config, metadata
from tests.service.test_store import MACHINES, PLACE, job, place, release, store_at


def _revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def test_a_new_database_gets_every_revision_and_the_tables_the_store_declares(database_url: str) -> None:
    store = store_at(database_url)
    with store.engine.connect() as conn:
        head = ScriptDirectory.from_config(alembic_config(conn)).get_current_head()
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    assert head is not None and _revision(store.engine) == head
    place(store, job("one", gpu=2.0))
    store.close()
    again = store_at(database_url)  # at the head already: nothing to do
    assert _revision(again.engine) == head and set(again.snapshot().allocations) == {"one"}


def test_the_revisions_go_down_to_nothing_and_up_again(database_url: str) -> None:
    store = store_at(database_url)
    store.close()
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "base")
    with store.engine.connect() as conn:
        assert set(sa.inspect(conn).get_table_names()) <= {"alembic_version"}
    store.engine.dispose()
    assert store_at(database_url).snapshot().generation == 0


def test_a_database_the_previous_version_made_upgrades_in_place(database_url: str) -> None:
    store = store_at(database_url)
    place(store, job("kept", gpu=2.0))
    generation = store.snapshot().generation
    with store.engine.begin() as conn:  # the tables were the same; only Alembic's own is new
        conn.exec_driver_sql("DROP TABLE alembic_version")
    store.close()
    store.engine.dispose()
    upgraded = store_at(database_url)
    assert _revision(upgraded.engine) is not None
    assert upgraded.snapshot().generation == generation and set(upgraded.snapshot().allocations) == {"kept"}
    assert release(upgraded, "kept") and store_at(database_url).snapshot().allocations == {}


def test_a_database_of_the_first_layout_gets_every_revision_and_keeps_its_state(database_url: str) -> None:
    engine = sa.create_engine(database_url)
    first = build_cluster("first layout", MACHINES, rack_size=1)
    running = job("first", gpu=2.0)
    decision = PLACE(ClusterSnapshot.empty(first), running)
    row = placed_row(first, decision, running, {"records": []}, 1, time.time())
    with engine.begin() as conn:  # the tables and indexes as the first version of the service made them
        conn.exec_driver_sql("CREATE TABLE cluster_state (id INTEGER NOT NULL PRIMARY KEY, generation BIGINT NOT NULL, "
                             "cluster TEXT NOT NULL, updated_at FLOAT NOT NULL)")
        conn.exec_driver_sql("CREATE TABLE jobs (job_id VARCHAR(128) NOT NULL PRIMARY KEY, state VARCHAR(16) NOT NULL, "
                             "demand TEXT NOT NULL, allocation TEXT NOT NULL, policy VARCHAR(32) NOT NULL, "
                             "details TEXT NOT NULL, placed_generation BIGINT NOT NULL, placed_at FLOAT NOT NULL, "
                             "ended_at FLOAT)")
        conn.exec_driver_sql("CREATE INDEX ix_jobs_state ON jobs (state)")
        conn.exec_driver_sql("CREATE TABLE completions (job_id VARCHAR(128) NOT NULL PRIMARY KEY "
                             "REFERENCES jobs (job_id), duration_s FLOAT NOT NULL, usage TEXT NOT NULL, "
                             "completed_at FLOAT NOT NULL)")
        conn.execute(sa.text("INSERT INTO cluster_state VALUES (1, 1, :spec, 0)"),
                     {"spec": json.dumps(cluster_to_json(first))})
        conn.execute(sa.text("INSERT INTO jobs VALUES (:job_id, :state, :demand, :allocation, :policy, :details, "
                             ":placed_generation, :placed_at, NULL)"), row)
    engine.dispose()
    upgraded = store_at(database_url)  # the default spec (CLUSTER) must not replace the stored one
    snapshot = upgraded.snapshot()
    assert snapshot.cluster.name == "first layout" and snapshot.generation == 1
    assert set(snapshot.allocations) == {"first"}
    with upgraded.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    assert release(upgraded, "first") and store_at(database_url).snapshot().generation == 2


def test_a_database_of_the_earlier_schema_gets_the_new_columns_and_keeps_its_jobs(database_url: str) -> None:
    store = store_at(database_url)
    place(store, job("old", gpu=2.0))
    with store.engine.begin() as conn:  # back to the tables as an earlier version created them
        conn.exec_driver_sql("DROP TABLE alembic_version")
        conn.exec_driver_sql("DROP INDEX ix_jobs_ended_generation")
        conn.exec_driver_sql("DROP INDEX ix_jobs_placed_generation")
        conn.exec_driver_sql("ALTER TABLE jobs DROP COLUMN ended_generation")
        conn.exec_driver_sql("ALTER TABLE cluster_state DROP COLUMN cluster_generation")
    store.engine.dispose()
    upgraded = store_at(database_url)
    assert set(upgraded.snapshot().allocations) == {"old"}
    assert release(upgraded, "old") and store_at(database_url).snapshot().allocations == {}
    columns = {c["name"] for c in sa.inspect(upgraded.engine).get_columns("jobs")}
    assert "ended_generation" in columns
    assert {i["name"] for i in sa.inspect(upgraded.engine).get_indexes("jobs")} >= {
        "ix_jobs_ended_generation", "ix_jobs_placed_generation"}


def test_a_database_with_the_spec_in_the_generation_row_gets_it_moved_and_keeps_its_state(database_url: str) -> None:
    store = store_at(database_url)
    place(store, job("kept", gpu=2.0))
    run_cycle(store, [Replace(build_cluster("loaded later", MACHINES, rack_size=1))])
    generation = store.snapshot().generation
    with store.engine.begin() as conn:  # back to one row holding the generation and the spec
        conn.exec_driver_sql("DROP TABLE alembic_version")
        spec = conn.exec_driver_sql("SELECT cluster FROM cluster_spec").scalar_one()
        conn.exec_driver_sql("ALTER TABLE cluster_state ADD COLUMN cluster TEXT NOT NULL DEFAULT ''")
        conn.execute(sa.text("UPDATE cluster_state SET cluster = :spec"), {"spec": spec})
        conn.exec_driver_sql("DROP TABLE cluster_spec")
    store.close()
    store.engine.dispose()
    upgraded = store_at(database_url)  # the default spec must not replace the stored one
    snapshot = upgraded.snapshot()
    assert snapshot.generation == generation and set(snapshot.allocations) == {"kept"}
    assert snapshot.cluster.name == "loaded later"
    assert "cluster" not in {c["name"] for c in sa.inspect(upgraded.engine).get_columns("cluster_state")}
    assert release(upgraded, "kept") and store_at(database_url).snapshot().generation == generation + 1
