"""trainrun.adapters.clients: cached clients, one per service, endpoint, region and key, sharing one set of service
models (a model loaded per client cost the local runtime ~350 MB per run: each run has new keys)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trainrun.adapters import clients as aws


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    aws.forget_clients()
    yield
    aws.forget_clients()


def _client_as(monkeypatch: pytest.MonkeyPatch, key: str, endpoint: str = "http://127.0.0.1:1") -> object:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", f"secret-of-{key}")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    return aws.client("ec2", "us-west-2")


def test_each_key_gets_its_own_client_signing_with_its_own_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _client_as(monkeypatch, "AKIAFIRST")
    second = _client_as(monkeypatch, "AKIASECOND")
    assert first is not second
    assert first._request_signer._credentials.secret_key == "secret-of-AKIAFIRST"  # type: ignore[attr-defined]
    assert second._request_signer._credentials.secret_key == "secret-of-AKIASECOND"  # type: ignore[attr-defined]
    assert _client_as(monkeypatch, "AKIAFIRST") is first


def test_clients_of_every_key_and_endpoint_share_one_loaded_service_model(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _client_as(monkeypatch, "AKIAFIRST", "http://127.0.0.1:1")
    second = _client_as(monkeypatch, "AKIASECOND", "http://127.0.0.1:2")
    first_model = first.meta.service_model._service_description  # type: ignore[attr-defined]
    assert first_model is second.meta.service_model._service_description  # type: ignore[attr-defined]


def test_forgotten_clients_are_made_again(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _client_as(monkeypatch, "AKIAFIRST")
    aws.forget_clients()
    assert _client_as(monkeypatch, "AKIAFIRST") is not first
