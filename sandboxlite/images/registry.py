"""An OCI distribution (registry v2) client: what a pull needs, on the standard library.

    Registry(registry, credentials=, insecure=)   one registry (``docker.io``, ``ghcr.io``, ``127.0.0.1:5000``)
      .manifest(repository, reference)            (body, media type, digest) of a tag or digest, checked
      .blob(repository, digest, offset)           (stream, start): the blob from byte ``start`` on

Authentication is what the registry asks for in its ``WWW-Authenticate`` challenge: a bearer
token from its realm (anonymous, or with the credentials as basic auth there), or basic auth
sent with every request.  The registry's token is kept per scope for the client's life.
Redirects (blob downloads go to object storage) are followed, at most ``MAX_REDIRECTS``, and the
``Authorization`` header is sent only to the registry's own host; a redirect from https to http
is refused.  Plain http (and TLS without verification) only with ``insecure=True``, which is
refused for any host that is not loopback: an insecure pull from a real network could be served
anything, and digests would only prove that what came is what the manifest said.

Errors are ``ImageError`` with the registry's own error code and message when it sent one.
Transient failures (a reset connection, a 5xx, a 429) raise ``TransientError``, which callers
may retry (``pull`` does, resuming blobs where they stopped).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import re
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from typing import IO

from ..errors import ImageError
from .blobs import check_digest
from .credentials import Credentials
from .oci import DOCKER_LIST, DOCKER_MANIFEST, MAX_JSON, OCI_INDEX, OCI_MANIFEST

TIMEOUT = 60.0
MAX_REDIRECTS = 5
MANIFEST_ACCEPT = ", ".join([OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST])
DOCKER_HUB_ENDPOINT = "registry-1.docker.io"
USER_AGENT = "sandboxlite (image pull)"
_CHALLENGE = re.compile(r'([A-Za-z_]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


class TransientError(ImageError):
    """A failure that may pass on a retry: a dropped connection, a 5xx, a 429."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (without a port; ``[::1]`` allowed) is this machine: ``localhost`` or a loopback address."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_host(registry: str) -> tuple[str, int | None]:
    """``host:port`` -> (host, port); ``[::1]:5000`` -> (``::1``, 5000)."""
    if registry.startswith("["):
        host, _, rest = registry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    host, colon, port = registry.rpartition(":")
    return (host, int(port)) if colon and port.isdigit() else (registry, None)


@dataclass
class _Url:
    scheme: str
    host: str
    port: int | None
    target: str  # path and query

    @classmethod
    def parse(cls, url: str) -> _Url:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ImageError(f"the registry sent an unusable URL {url[:200]!r}", hint="the registry is misbehaving")
        return cls(u.scheme, u.hostname, u.port, (u.path or "/") + (f"?{u.query}" if u.query else ""))

    @property
    def origin(self) -> tuple[str, str, int | None]:
        return (self.scheme, self.host, self.port)


class Registry:
    """One registry's v2 API, as one user (``credentials``) sees it."""

    def __init__(self, registry: str, *, credentials: Credentials | None = None, insecure: bool = False,
                 timeout: float = TIMEOUT) -> None:  # fmt: skip
        host, port = split_host(registry)
        if insecure and not is_loopback(host):
            raise ImageError(f"--insecure is only for registries on this machine (loopback), not {registry}",
                             hint="pull over TLS (drop --insecure); a registry with a private CA: add the CA to the "
                                  "system's trust store")  # fmt: skip
        endpoint = DOCKER_HUB_ENDPOINT if registry == "docker.io" else host
        self.name = registry
        self.base = _Url("http" if insecure else "https", endpoint, port, "/v2/")
        self.credentials = credentials
        self.insecure = insecure
        self.timeout = timeout
        self._auth: str | None = None  # the Authorization header that worked
        self._lock = threading.Lock()

    # -- the API -----------------------------------------------------------------------------

    def manifest(self, repository: str, reference: str) -> tuple[bytes, str, str]:
        """The manifest or index ``reference`` (a tag or a digest) of ``repository``: (body, media
        type, digest).  The digest is the body's own sha256, and must be the reference when it is
        one, and the registry's ``Docker-Content-Digest`` when it sends one."""
        response = self._get(f"{repository}/manifests/{reference}", repository, {"Accept": MANIFEST_ACCEPT},
                             what=f"{self.name}/{repository}:{reference}")  # fmt: skip
        with response:
            body = response.read(MAX_JSON + 1)
        if len(body) > MAX_JSON:
            raise ImageError(f"the manifest of {self.name}/{repository}:{reference} is larger than {MAX_JSON} bytes",
                             hint="the registry is misbehaving")  # fmt: skip
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        for claimed in (reference if reference.startswith("sha256:") else None,
                        response.getheader("Docker-Content-Digest")):  # fmt: skip
            if claimed and claimed != digest:
                raise ImageError(f"the manifest {self.name}/{repository}@{claimed} hashes to {digest}",
                                 hint="the registry (or something between) served other content than it names: "
                                      "do not trust it")  # fmt: skip
        media_type = (response.getheader("Content-Type") or "").split(";")[0].strip()
        return body, media_type, digest

    def blob(self, repository: str, digest: str, offset: int = 0) -> tuple[IO[bytes], int]:
        """Blob ``digest``, from byte ``offset`` when the registry honours the range (else from 0):
        (stream, the offset it starts at).  The caller closes the stream and checks the digest."""
        check_digest(digest, "blob digest")
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        response = self._get(f"{repository}/blobs/{digest}", repository, headers,
                             what=f"blob {digest} of {self.name}/{repository}")  # fmt: skip
        start = 0
        if response.status == 206:
            m = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", (response.getheader("Content-Range") or "").strip())
            if m is None or int(m.group(1)) != offset:
                response.close()
                raise ImageError(f"the registry answered a range request for {digest} with a wrong Content-Range",
                                 hint="the registry is misbehaving")  # fmt: skip
            start = offset
        return _Stream(response), start

    def check(self) -> None:
        """Whether the registry answers the v2 API (and accepts the credentials): ImageError if not."""
        self._get("", None, {}, what=f"the registry {self.name}").close()

    # -- requests ----------------------------------------------------------------------------

    def _get(self, path: str, repository: str | None, headers: dict[str, str], *, what: str):
        url = _Url(self.base.scheme, self.base.host, self.base.port, self.base.target + path)
        response = self._follow(url, headers)
        if response.status == 401:
            challenge = response.getheader("WWW-Authenticate") or ""
            response.read(MAX_JSON)
            response.close()
            self._authenticate(challenge, repository, what)
            response = self._follow(url, headers)
        if response.status in (200, 206):
            return response
        raise self._failure(response, what)

    def _follow(self, url: _Url, headers: dict[str, str]) -> http.client.HTTPResponse:
        for _ in range(MAX_REDIRECTS + 1):
            sent = {"User-Agent": USER_AGENT, **headers}
            if url.origin == self.base.origin and self._auth:
                sent["Authorization"] = self._auth
            response = self._request(url, sent)
            if response.status not in (301, 302, 303, 307, 308):
                return response
            location = response.getheader("Location") or ""
            response.read(MAX_JSON)
            response.close()
            nxt = _Url.parse(urllib.parse.urljoin(f"{url.scheme}://{_netloc(url)}{url.target}", location))
            if url.scheme == "https" and nxt.scheme == "http":
                raise ImageError(f"the registry redirected from https to http ({nxt.host})",
                                 hint="the registry or something between is misbehaving: not followed")  # fmt: skip
            url = nxt
        raise ImageError(f"the registry redirected more than {MAX_REDIRECTS} times", hint="the registry is misbehaving")

    def _request(self, url: _Url, headers: dict[str, str]) -> http.client.HTTPResponse:
        if url.scheme == "https":
            context = ssl.create_default_context()
            if self.insecure:  # (loopback only, checked in __init__)
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                url.host, url.port, timeout=self.timeout, context=context)
        else:
            conn = http.client.HTTPConnection(url.host, url.port, timeout=self.timeout)
        try:
            conn.request("GET", url.target, headers=headers)
            return conn.getresponse()
        except ssl.SSLError as e:
            conn.close()
            hint = ("is it a plain http registry on this machine? add --insecure" if is_loopback(url.host)
                    else "check the registry's certificate, or add its CA to the system's trust store")
            raise ImageError(f"TLS with {_netloc(url)} failed: {e.reason or e}", hint=hint) from None
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransientError(f"cannot reach {_netloc(url)}: {e}",
                                 hint="check the name, the network and any proxy; then pull again") from None

    def _authenticate(self, challenge: str, repository: str | None, what: str) -> None:
        scheme, params = parse_challenge(challenge)
        if scheme == "basic":
            if self.credentials is None:
                raise _login_needed(self.name, what)
            with self._lock:
                self._auth = "Basic " + _basic(self.credentials)
            return
        if scheme != "bearer" or not params.get("realm"):
            raise ImageError(f"{self.name} asks for an authentication we do not speak ({challenge[:120]!r})",
                             hint="sandboxlite speaks bearer tokens and basic auth")  # fmt: skip
        scope = params.get("scope") or (f"repository:{repository}:pull" if repository else "")
        token = self._token(params["realm"], params.get("service", ""), scope)
        with self._lock:
            self._auth = f"Bearer {token}"

    def _token(self, realm: str, service: str, scope: str) -> str:
        query = urllib.parse.urlencode([(k, v) for k, v in (("service", service), ("scope", scope)) if v])
        url = _Url.parse(realm + ("&" if "?" in realm else "?") + query if query else realm)
        if url.scheme == "http" and not (self.insecure and is_loopback(url.host)):
            raise ImageError(f"{self.name} sends us for a token to plain http ({url.host})",
                             hint="credentials would cross the network unencrypted: not followed")  # fmt: skip
        headers = {"User-Agent": USER_AGENT}
        if self.credentials is not None:
            headers["Authorization"] = "Basic " + _basic(self.credentials)
        response = self._request(url, headers)
        with response:
            body = response.read(MAX_JSON)
        if response.status == 401 and self.credentials is None:
            raise _login_needed(self.name, scope or "its API")
        if response.status == 401:
            raise ImageError(f"the token service of {self.name} refused the credentials",
                             hint="check the user and password (docker login, or --username/--password-stdin)")
        if response.status != 200:
            raise _status_error(response.status, body, f"the token service of {self.name}")
        try:
            doc = json.loads(body)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise ImageError(f"the token service of {self.name} sent no token", hint="the registry is misbehaving")
        return token

    def _failure(self, response: http.client.HTTPResponse, what: str) -> ImageError:
        with response:
            body = response.read(MAX_JSON)
        if response.status == 401:
            if self.credentials is None:
                return _login_needed(self.name, what)
            return ImageError(f"{self.name} refused the credentials for {what}",
                              hint="check the user and password (docker login, or --username/--password-stdin)")
        return _status_error(response.status, body, what)


class _Stream:
    """A response body as a file: transport errors while reading become ``TransientError``."""

    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.response = response

    def read(self, n: int = -1) -> bytes:
        try:
            data = self.response.read(n)
        except (OSError, http.client.HTTPException) as e:
            raise TransientError(f"the download broke off: {e or type(e).__name__}",
                                 hint="pull again: it resumes where it stopped") from None
        if not data and n != 0 and self.response.length:  # (closed before its Content-Length)
            raise TransientError(f"the download broke off {self.response.length} bytes before its end",
                                 hint="pull again: it resumes where it stopped")  # fmt: skip
        return data

    def close(self) -> None:
        self.response.close()

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="https://auth",service="reg",scope="repository:a:pull"`` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): (quoted.replace('\\"', '"') if quoted else bare) for k, quoted, bare in _CHALLENGE.findall(rest)}
    return scheme.lower(), params


def _basic(credentials: Credentials) -> str:
    return base64.b64encode(f"{credentials.username}:{credentials.password}".encode()).decode()


def _netloc(url: _Url) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{url.port}" if url.port else host


def _login_needed(registry: str, what: str) -> ImageError:
    return ImageError(f"{registry} needs a login for {what}",
                      hint=f"docker login {registry} (or podman login), or give --username and --password-stdin")


def _registry_errors(body: bytes) -> str:
    """The registry's own error codes and messages (``{"errors": [{"code", "message"}]}``)."""
    try:
        errors = json.loads(body).get("errors") or []
        return "; ".join(f"{e.get('code', '?')}: {e.get('message', '')}".strip() for e in errors[:3] if isinstance(e, dict))
    except (ValueError, AttributeError):
        return ""


def _status_error(status: int, body: bytes, what: str) -> ImageError:
    detail = _registry_errors(body)
    said = f" ({detail})" if detail else ""
    if status == 404:
        return ImageError(f"{what} is not in the registry{said}",
                          hint="check the name and the tag (is it spelled as the registry has it?)")
    if status == 403:
        return ImageError(f"the registry denies access to {what}{said}",
                          hint="the account lacks permission for it, or the image is private")
    if status == 429 or status >= 500:
        return TransientError(f"the registry answered {status} for {what}{said}",
                              hint="the registry is busy or rate-limits you: wait and pull again")
    return ImageError(f"the registry answered {status} for {what}{said}", hint="check the reference and the registry")
