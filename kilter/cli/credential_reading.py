"""What ``/metrics`` and ``/readyz`` say about kilter's credentials, for ``kilter serve`` and ``kilter certs``.

Read at scrape time from ``kube.credentials.Credentials``: the 401s that
stood after the credentials were read again (the alert: the API server no
longer takes what kilter presents, so watches, Lease renewals and binds are
failing), the rotations taken, and the sources that could not be read
again. Its own module so that ``kilter certs`` registers it without the
servers' readings and what they import.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from kilter.kube.credentials import Credentials

__all__ = ["CredentialsReading"]


class CredentialsReading(Collector):
    """How kilter's credentials fare with the API server."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def collect(self) -> Iterator[CounterMetricFamily]:
        c = self.credentials
        yield CounterMetricFamily(
            "kilter_api_unauthorized",
            "Calls the API server answered 401 Unauthorized even after kilter read its credentials again",
            value=c.unauthorized,
        )
        yield CounterMetricFamily(
            "kilter_api_credential_rotations",
            "Times kilter started presenting new credentials (a token file, exec plugin or certificate renewed)",
            value=c.refreshed,
        )
        yield CounterMetricFamily(
            "kilter_api_credential_read_errors",
            "Readings of a credential source (token file, exec plugin, certificate files) that failed; the last "
            "credentials were kept",
            value=c.refresh_errors,
        )
