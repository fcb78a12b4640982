"""The commented `cdc.yaml` a new project starts from (`cdc-assets init`, and the Dagster component's
scaffold): one table, every optional key shown and commented out."""

STARTER_CONFIG = """\
# cdc.yaml: the tables cdc_assets keeps in sync. Paths are relative to this file.
warehouse: ./warehouse            # Delta tables, one folder per table (or gs://... s3://...)
landing: ./landing                # change files arrive under <landing>/<TABLE>/**
# spark:                          # optional Spark settings; default spark.master is local[2]
#   spark.master: local[2]
tables:
  - name: ORDERS                  # letters, digits, '_'; also the landing sub-folder
    keys: [order_id]              # the source's key columns
    format: datastream-json       # datastream-json | datastream-avro | debezium-json | changeset | bigquery-append | bigquery-cdc | snapshot
    # partition_by: [region]      # target partition columns
    # base_snapshot: ./exports/ORDERS.csv       # the source export the table starts from
    # reconcile_with: ./exports/ORDERS.csv      # check the target against this export
    # columns: {amount: "decimal(12,2)"}        # types of columns whose files carry none (JSON, CSV)
    # apply: {min_changes: 1000, max_staleness: 15m}   # merges wait; default: every batch
    # maintenance: {retention: 7d, schedule: "0 3 * * *"}
    # history: true               # every version of each key (SCD type 2); {track_except: [updated_at]}:
    #                             # a change of only those columns updates the current version in place
    # deletes: soft               # keep deleted keys' rows, flagged _cdc_deleted; default: hard
    # partial_updates: true       # an update's null or absent column keeps the key's value
"""

STARTER_WORKSPACE = """\
# `dagster dev` in this folder loads the tables of ./cdc.yaml (or of the file CDC_ASSETS_CONFIG names).
load_from:
  - python_module:
      module_name: cdc_assets.definitions
      location_name: cdc_assets
"""
