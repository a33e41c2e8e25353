"""Records: what was measured, where, and how selectors compare on it.

- :mod:`~algosel.records.schema`: the :class:`~algosel.records.schema.Record` row and its Parquet schema;
- :mod:`~algosel.records.store`: datasets of Parquet parts and the sweep journal;
- :mod:`~algosel.records.environment`: the environment record of a GPU and software stack, and the one
  compatibility check between environments;
- :mod:`~algosel.records.catalogue`: recorded candidate lists queried by problem;
- :mod:`~algosel.records.analysis`: every selector's choice against the best measured candidate.
"""

from algosel.records.schema import COLUMNS, SCHEMA, SCHEMA_VERSION, Record
from algosel.records.store import (
    Journal,
    RecordsError,
    load_records,
    main_environment,
    part_paths,
    read_part,
    write_part,
)

__all__ = [
    "COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Journal",
    "Record",
    "RecordsError",
    "load_records",
    "main_environment",
    "part_paths",
    "read_part",
    "write_part",
]
