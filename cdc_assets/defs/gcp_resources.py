"""Google Cloud resources, imported only by configurations that use Google Cloud (importing
dagster_gcp costs about a second in every run)."""
from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Iterator

from dagster_gcp import BigQueryResource, GCSResource

__all__ = ["CdcBigQueryResource", "GCSResource"]


class CdcBigQueryResource(BigQueryResource):
    """dagster_gcp's BigQueryResource, which also reaches the BigQuery emulator named by
    BIGQUERY_EMULATOR_HOST (its own client takes the address but still asks for credentials)."""

    @contextlib.contextmanager
    def get_client(self) -> Iterator:
        yield self.make_client()

    def get_object_to_set_on_execution_context(self):
        # a client, not a generator: a sensor's context hands this object over as it is
        return self.make_client()

    def make_client(self):
        from google.cloud import bigquery

        host = os.environ.get("BIGQUERY_EMULATOR_HOST")
        if host:
            from google.api_core.client_options import ClientOptions
            from google.auth.credentials import AnonymousCredentials

            endpoint = host if "://" in host else f"http://{host}"
            return bigquery.Client(project=self.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or "emulator",
                                   location=self.location, credentials=AnonymousCredentials(),
                                   client_options=ClientOptions(api_endpoint=endpoint))
        credentials = None
        if self.gcp_credentials:
            # dagster_gcp's form: a base64-encoded service-account key (read here, never logged or written)
            from google.oauth2 import service_account

            info = json.loads(base64.b64decode(self.gcp_credentials))
            credentials = service_account.Credentials.from_service_account_info(info)
        return bigquery.Client(project=self.project, location=self.location, credentials=credentials)
