"""What the tests share, by what it holds:

- `config`: a cdc.yaml written for a test, and the engine's settings for one module;
- `landing`: files landed as a writer lands them (JSON lines, Parquet);
- `feeds`: generated feeds, published into the landing area batch by batch;
- `records`: change records in each source's format, as its writer produces them;
- `runs`: a table's run through the Dagster jobs in this process, and what a job run materialized;
- `steps`: a table's engine steps called directly, without Dagster;
- `warehouse`: readings of the Delta tables a run leaves;
- `expected`: what a feed's target must hold (its export, the rules), compared by meaning;
- `ports`: free and listening local ports.
"""
