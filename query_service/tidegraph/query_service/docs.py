"""``/docs``: Swagger UI served from a package, so the page works offline.

FastAPI's default page loads Swagger UI from a CDN and is blank without the internet. The
assets come from the ``swagger-ui-py`` distribution (Swagger UI 5, which reads OpenAPI 3.1)
and are served under ``/docs/assets``; the package is located, not imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def swagger_assets() -> Path | None:
    """The folder holding Swagger UI's files, or ``None`` when the package is absent."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and its assets from the package (no page when it is missing)."""
    folder = swagger_assets()
    if folder is None or app.openapi_url is None:
        return
    app.mount(ASSETS, StaticFiles(directory=folder), name="docs-assets")
    openapi_url = app.openapi_url
    title = f"{app.title} — docs"

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
