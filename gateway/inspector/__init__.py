"""The inspector: a web page to watch a conversation's mind over time, compare branches and ask why.

Lives here: the route that serves the page and its assets (``routes``), and the assets
themselves (``static/``: ``index.html``, ``inspector.css`` and the page's JavaScript modules in
``static/js/``, plain ES modules with no build step and no library). Every figure the page shows
comes from the public JSON API with the tenant's token (kept in the browser's session storage),
so the page holds no data and needs no session of its own; nothing is fetched from elsewhere
(a ``Content-Security-Policy`` of ``'self'`` says so to the browser).

May import FastAPI/Starlette and the standard library; nothing of the runtime: the page reads
what every client reads.
"""

__all__: list[str] = []
