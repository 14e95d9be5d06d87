"""The graph explorer page (``GET /ui``): a single page over this same API, no build step.

Its assets (HTML, CSS, plain JavaScript drawing SVG) ship inside the package and are served
from here; nothing is fetched from elsewhere (the Content-Security-Policy says ``'self'``
only). The page holds no data of its own: every read is an API call carrying the key typed
into the page, so it reaches exactly what that key reaches.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

PACKAGE, ASSETS_DIR = "tidegraph.query_service", "explorer_assets"
ASSETS = files(PACKAGE) / ASSETS_DIR
CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'"
)


def mount_explorer(app: FastAPI, *, keys_required: bool) -> None:
    """Serve the page at ``/ui`` and its assets under ``/ui/assets``."""
    page = (ASSETS / "index.html").read_text(encoding="utf-8")
    page = page.replace("<body>", f'<body data-keys="{str(keys_required).lower()}">', 1)

    @app.get("/ui", tags=["service"], response_class=HTMLResponse, include_in_schema=False)
    async def explorer() -> HTMLResponse:
        """The graph explorer."""
        return HTMLResponse(page, headers={"Content-Security-Policy": CSP})

    # Found through the package, as the page is: an installed wheel has no source tree.
    assets = StaticFiles(packages=[(PACKAGE, ASSETS_DIR)])
    app.mount("/ui/assets", assets, name="explorer-assets")
