"""Where students' devices reach this app: the room's address (KVVIZ_PUBLIC_URL, Streamlit's configured
address, this machine's LAN address, or what the teacher browsed to), and its QR code drawn here."""

from __future__ import annotations

import io
import os
import socket
from urllib.parse import urlsplit

import qrcode
import streamlit as st
from streamlit import config


def qr_png(text: str) -> bytes:
    """The link as a QR code, a PNG drawn here (no image host)."""
    buffer = io.BytesIO()
    qrcode.make(text, border=2, box_size=8).save(buffer, format="PNG")  # Pillow's image (Streamlit needs Pillow)
    return buffer.getvalue()


def room_address(page: str) -> tuple[str, str | None]:
    """This app's address as a student's device reaches it, without the page's name, and a sentence
    when there is none but the teacher's own (localhost). In order: KVVIZ_PUBLIC_URL, Streamlit's
    browser.serverAddress when set, this machine's LAN address, the address the teacher browsed to."""
    public = os.environ.get("KVVIZ_PUBLIC_URL", "").strip().rstrip("/")
    if public:
        return (public if "://" in public else f"http://{public}"), None
    path = "/" + config.get_option("server.baseUrlPath").strip("/") if config.get_option("server.baseUrlPath") else ""
    port = config.get_option("browser.serverPort") or config.get_option("server.port")
    host = config.get_option("browser.serverAddress")
    if not host or not config.is_manually_set("browser.serverAddress") or _local(host):
        host = lan_address()
    if host:
        return f"http://{host}:{port}{path}", None
    browsed = base_url(page)
    if not _local(urlsplit(browsed).hostname or "localhost"):
        return browsed, None
    return browsed, ("Students' devices cannot open this link (localhost, and no network address was found): "
                     "set KVVIZ_PUBLIC_URL to the address they reach this server at.")


def lan_address() -> str | None:
    """This machine's address on its network: the source address of a UDP socket connected towards a
    non-routable address (connecting a UDP socket sends no packet); None without a network."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if _local(address) or address == "0.0.0.0" else address


def _local(host: str) -> bool:
    return host in ("localhost", "::1", "") or host.startswith("127.")


def base_url(page: str) -> str:
    """This app's address as the teacher's browser sees it, without the page's name."""
    parts = urlsplit(st.context.url or "http://localhost:8501")
    path = parts.path.rstrip("/")
    if path.endswith("/" + page) or path == page:
        path = path[:-len(page)].rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path}"
