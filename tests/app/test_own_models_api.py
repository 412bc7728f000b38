"""Models of the user's at the API: which references a trigger may name, and what happens
when a result's series key (with the model's fingerprint, which only the worker can take)
differs from the key the API predicted for its cell."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.main import create_app
from app.models import Cell, Run, Series
from app.services import runs as run_service
from benchmarks.result import BenchResult
from benchmarks.spec import BenchSpec
from devkit.factories import bearer, bench_result, ingest_body, run_request

OWN = "mypkg.nets:build"


@pytest.fixture
def own_client(settings: Settings) -> Iterator[TestClient]:
    """The API of a server that imports models from the package `mypkg`."""
    with TestClient(create_app(settings.model_copy(
            update={"model_packages": ["mypkg"]}))) as client:
        yield client


def _post(client: TestClient, token: str, models: list[str], **overrides: Any) -> Any:
    body = run_request(matrix={"models": models, "weights": ["constant"]}, **overrides)
    return client.post("/api/v1/runs", json=body, headers=bearer(token))


BAD_MODELS = [
    ("https://example.com/model.pt2", "URLs are not models here"),
    ("file:../../etc/model.pt2", "'..' path parts are refused"),
    ("file:/srv/models/model.pt2", "relative to the worker's model path"),
    ("file:models\\m.pt2", "use '/'"),
    ("file:model.onnx", "ending in .pt2"),
    ("mypkg.nets", "is not one of resnet18"),
    ("mypkg.nets:build()", "expected package.module:factory"),
    ("mypkg.nets:os.system", "the factory is one name defined in the module"),
    ("mypkg.nets:build\n", "expected package.module:factory"),
    ("mypkg.nets:build.__globals__.get", "the factory is one name defined in the module"),
    ("torchvision:../x", "expected torchvision:NAME"),
    ("os:system", "'os' is Python's own (the standard library or a private module), not "
     "a package of models"),
    ("subprocess:getoutput", "'subprocess' is Python's own"),
    ("code:interact", "'code' is Python's own"),
    ("os.path:join", "'os' is Python's own"),
    ("_thread:start_new_thread", "'_thread' is Python's own"),
    ("__main__:main", "'__main__' is Python's own"),
    ("otherpkg.nets:build", "package 'otherpkg' is not one this server imports models from "
     "(listed in SPEEDWATCH_MODEL_PACKAGES: mypkg)"),
]
STDLIB_FACTORIES = ["subprocess:getoutput", "code:interact", "os:system", "pty:spawn"]


@pytest.mark.parametrize(("model", "says"), BAD_MODELS, ids=[m for m, _ in BAD_MODELS])
def test_a_model_that_is_garbage_a_path_out_a_url_or_an_unlisted_package_is_422(
    own_client: TestClient, ci_token: str, session: Session, model: str, says: str
) -> None:
    response = _post(own_client, ci_token, ["resnet18", model])
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["matrix.models[1]"]
    assert says in errors[0]["message"], errors[0]["message"]
    assert session.scalar(select(func.count()).select_from(Run)) == 0


def test_a_server_that_lists_no_package_refuses_every_factory(
    client: TestClient, ci_token: str
) -> None:
    response = _post(client, ci_token, [OWN])
    assert response.status_code == 422
    assert response.json()["errors"][0]["message"] == (
        "package 'mypkg' is not one this server imports models from (listed in "
        "SPEEDWATCH_MODEL_PACKAGES: none)")


def test_each_accepted_form_gets_cells_keyed_by_its_name_until_the_worker_fingerprints_it(
    own_client: TestClient, ci_token: str
) -> None:
    models = [OWN, "torchvision:resnet18", "timm:resnet18", "file:nets/small.pt2"]
    response = _post(own_client, ci_token, models)
    assert response.status_code == 201, response.text
    keys = sorted(c["series_key"].split("/")[0] for c in response.json()["cells"])
    assert keys == ["file:small.pt2", OWN, "timm:resnet18", "torchvision:resnet18"]
    assert sorted(c["spec"]["model"] for c in response.json()["cells"]) == sorted(models)


def _own_result(spec: BenchSpec, digest: str, speedup: float) -> BenchResult:
    result = bench_result(spec, speedup=speedup)
    result.fingerprint["model"] = {"reference": spec.model, "kind": "factory",
                                   "digest": digest, "fingerprint": "trace-v1"}
    result.series_key = spec.series_key("cpu", model_digest=digest)
    return result


def _measure(session: Session, client: TestClient, token: str, revision: str, digest: str,
             speedup: float) -> dict[str, Any]:
    """A run of the user's model whose worker fingerprinted it as `digest`."""
    run = _post(client, token, [OWN], revision=revision).json()
    [cell] = run["cells"]
    spec = run_service.claim_cell(session, cell["id"])
    assert spec is not None
    assert run_service.record_result(session, cell["id"], _own_result(spec, digest, speedup))
    run_service.finish_run_if_complete(session, run["id"])
    session.commit()
    return dict(client.get(f"/api/v1/runs/{run['id']}", headers=bearer(token)).json())


def test_a_result_keyed_with_the_fingerprint_replaces_the_predicted_key_and_detection_follows(
    own_client: TestClient, ci_token: str, session: Session
) -> None:
    """The same model (same digest) is compared with its last run; a changed model (another
    digest under the same reference) starts a series of its own: never compared with the
    old one, so its 20% lower speedup is no regression."""
    first = _measure(session, own_client, ci_token, "r1", "aaaaaaaaaaaa", 2.0)
    [cell] = first["cells"]
    assert cell["series_key"].startswith(f"{OWN}@aaaaaaaaaaaa/onnxruntime/constant/")
    assert any("no baseline yet" in r for r in first["reasons"]), first["reasons"]

    same = _measure(session, own_client, ci_token, "r2", "aaaaaaaaaaaa", 2.0)
    assert same["verdict"] == "pass"
    assert not any("no baseline yet" in r for r in same["reasons"]), same["reasons"]

    changed = _measure(session, own_client, ci_token, "r3", "bbbbbbbbbbbb", 1.6)
    assert changed["verdict"] == "pass", changed["reasons"]
    assert any("no baseline yet" in r for r in changed["reasons"]), changed["reasons"]
    assert changed["cells"][0]["series_key"].startswith(f"{OWN}@bbbbbbbbbbbb/")

    models = session.scalars(select(Series.model).order_by(Series.model)).all()
    assert models == [f"{OWN}@aaaaaaaaaaaa", f"{OWN}@bbbbbbbbbbbb"]
    # ':' and '@' in a key survive the API's and the dashboard's series URLs
    key = quote(cell["series_key"], safe="/")
    points = own_client.get(f"/api/v1/series/{key}/points", headers=bearer(ci_token))
    assert points.status_code == 200, points.text
    assert [p["revision"] for p in points.json()["points"]] == ["r1", "r2"]
    own_client.cookies.set("speedwatch_token", ci_token)  # the pages read it from there
    page = own_client.get(f"/series/{key}")
    assert page.status_code == 200 and "mypkg.nets:build@aaaaaaaaaaaa" in page.text


def test_a_result_whose_key_hides_the_fingerprint_it_records_fails_its_cell(
    own_client: TestClient, ci_token: str, session: Session
) -> None:
    run = _post(own_client, ci_token, [OWN]).json()
    [cell] = run["cells"]
    spec = run_service.claim_cell(session, cell["id"])
    assert spec is not None
    result = _own_result(spec, "aaaaaaaaaaaa", 2.0)
    result.series_key = spec.series_key("cpu")  # the predicted key, digest left out

    assert run_service.record_result(session, cell["id"], result) is None
    session.commit()
    stored = session.get(Cell, cell["id"])
    assert stored is not None and stored.status == "failed"
    assert "does not match its spec and fingerprint" in (stored.error or "")


@pytest.mark.parametrize("digest", ["AAAAAAAAAAAA", "abc", "../../x", 12])
def test_an_ingested_result_with_a_digest_that_cannot_be_one_is_422_naming_it(
    client: TestClient, ci_token: str, digest: object
) -> None:
    spec = BenchSpec(model=OWN, backend="onnxruntime")
    document = _own_result(spec, "aaaaaaaaaaaa", 2.0).to_dict()
    document["fingerprint"]["model"]["digest"] = digest
    response = client.post("/api/v1/results", json=ingest_body(document),
                           headers=bearer(ci_token))
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "result.fingerprint.model.digest"


def test_an_ingested_result_of_a_user_model_lands_in_the_series_its_fingerprint_names(
    client: TestClient, ci_token: str, session: Session
) -> None:
    """Ingest needs no package list: nothing is imported, the document is only stored."""
    spec = BenchSpec(model="file:/home/ci/exports/small.pt2", backend="onnxruntime")
    result = _own_result(spec, "cccccccccccc", 1.8)
    response = client.post("/api/v1/results", json=ingest_body(result),
                           headers=bearer(ci_token))
    assert response.status_code == 201, response.text
    assert response.json()["series_key"].startswith("file:small.pt2@cccccccccccc/")


@pytest.mark.parametrize("model", STDLIB_FACTORIES)
def test_a_server_that_imports_any_package_still_refuses_the_standard_library(
    settings: Settings, ci_token: str, model: str,
) -> None:
    with TestClient(create_app(settings.model_copy(update={"model_packages": ["*"]}))) as any_:
        response = _post(any_, ci_token, [model])
    assert response.status_code == 422, response.text
    [error] = response.json()["errors"]
    assert error["field"] == "matrix.models[0]" and "Python's own" in error["message"]


# ---- the same rule for a result posted with its spec (it reaches repro bundles) -----------

def _upload(client: TestClient, token: str, model: str, revision: str) -> Any:
    spec = BenchSpec(model=model, width=8, image_size=32)
    result = _own_result(spec, "cccccccccccc", 1.5)
    return client.post("/api/v1/results", headers=bearer(token),
                       json=ingest_body(result, project="uploads", revision=revision))


@pytest.mark.parametrize("model", STDLIB_FACTORIES)
def test_an_upload_whose_spec_names_the_standard_library_is_422_whatever_the_server_lists(
    settings: Settings, ci_token: str, session: Session, model: str,
) -> None:
    for packages in ([], ["*"]):
        with TestClient(create_app(settings.model_copy(
                update={"model_packages": packages}))) as client:
            response = _upload(client, ci_token, model, f"stdlib-{model}")
        assert response.status_code == 422, response.text
        [error] = response.json()["errors"]
        assert error["field"].startswith("result.spec"), error
        assert "Python's own" in error["message"], error
    stored = session.scalars(select(Cell.spec)).all()
    assert not [spec for spec in stored if spec.get("model") == model]


def test_an_upload_names_a_factory_of_a_listed_package_only(
    own_client: TestClient, client: TestClient, ci_token: str,
) -> None:
    refused = _upload(client, ci_token, OWN, "unlisted")  # this server lists none
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"] == [{
        "field": "result.spec.model",
        "message": "package 'mypkg' is not one this server imports models from (listed in "
                   "SPEEDWATCH_MODEL_PACKAGES: none)"}]
    accepted = _upload(own_client, ci_token, OWN, "listed")
    assert accepted.status_code == 201, accepted.text
