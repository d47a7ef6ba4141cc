"""Where sink batches go: `ClickHouseWriter` inserts them with deduplication tokens.

Any object with the same two methods can stand in as the insert target (the sink takes
it as a parameter), which is how tests make ClickHouse fail for a while.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence


class InsertTarget(Protocol):
    def insert_block(self, table: str, block: bytes, token: str) -> None: ...

    def insert_rows(self, table: str, columns: Sequence[str], rows: list[list], token: str) -> None: ...


class ClickHouseWriter:
    """Inserts into `<database>.<table>`; a retried insert with the same token is dropped
    by the server (`non_replicated_deduplication_window` on every table)."""

    def __init__(self, client: Any, database: str):
        self.client = client
        self.database = database

    def insert_block(self, table: str, block: bytes, token: str) -> None:
        self.client.raw_insert(f"{self.database}.{table}", None, block, fmt="Native",
                               settings={"insert_deduplication_token": token})

    def insert_rows(self, table: str, columns: Sequence[str], rows: list[list], token: str) -> None:
        self.client.insert(f"{self.database}.{table}", rows, column_names=list(columns),
                           settings={"insert_deduplication_token": token})
