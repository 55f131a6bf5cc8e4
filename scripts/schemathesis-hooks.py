"""Schemathesis hooks for scripts/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

Two request rules cannot be written in JSON Schema, so a schema-valid value can still be a 400
that openapi.yaml documents. Left alone, the `positive_data_acceptance` check would report
those, and valid requests would never get past them. Just before each request goes out, these
hooks change such a value into an accepted one of the same shape. Schemathesis then checks the
request again, so a negative case stays negative. The hooks never touch a value that is invalid
for a reason the schema can express.

- `POST /calls` `scheduledAt`: must be 10 s to 30 days after the server's clock. An RFC 3339
  date-time gets a new instant in that window, keeping its offset.
- `POST /agent` `timezone`: must be an IANA zone name (the server's list is chrono-tz). A string
  that is not one of a few real zones becomes one of them.
- `POST /agent` round 2 `results[].stepId`: must be a step id a round 1 issued (signed with
  `AGENT_STEP_KEY`, see shared/src/agent/binding.rs). Each string of 1 to 64 characters becomes
  the id of that step of a fresh plan (one plan per request, steps numbered by position),
  signed with the key koe-local runs with here (`KOE_SCHEMATHESIS_STEP_KEY`).

Every choice comes from the value itself, not from a random source, so a seeded run stays
reproducible.
"""

import base64
import datetime
import hashlib
import hmac
import itertools
import os
import re
import struct
import zlib

import schemathesis

ZONES = [
    "Asia/Tokyo",
    "America/New_York",
    "Europe/Berlin",
    "UTC",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
]

RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?(?P<offset>[Zz]|[+-]\d{2}:\d{2})$"
)


def stable(value: str) -> int:
    return zlib.crc32(value.encode("utf-8", "surrogatepass"))


def within_window(value: str) -> str:
    match = RFC3339.match(value)
    if not match:
        return value
    offset = match.group("offset")
    if offset in ("Z", "z"):
        tz = datetime.timezone.utc
    else:
        sign = 1 if offset[0] == "+" else -1
        hours, minutes = int(offset[1:3]), int(offset[4:6])
        if hours > 23 or minutes > 59:
            return value
        tz = datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))
    # 2 minutes to 29 days ahead: far from both edges, whatever the request's latency.
    ahead = datetime.timedelta(seconds=120 + stable(value) % (29 * 86400))
    when = (datetime.datetime.now(datetime.timezone.utc) + ahead).astimezone(tz)
    text = when.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") and offset in ("Z", "z") else text


STEP_KEY = os.environ.get("KOE_SCHEMATHESIS_STEP_KEY", "").encode()
PLANS = itertools.count(1)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def device_hash(device: str, salt: str = "koe") -> str:
    return hashlib.sha256(salt.encode() + b"\0" + device.encode()).digest()[:6].hex()


def step_id(step: int, plan: str, device: str, expires: int) -> str:
    parts = [b"koe-step-id-v1", bytes([step]), plan.encode(), device.encode(), struct.pack(">q", expires)]
    message = b"".join(struct.pack(">I", len(p)) + p for p in parts)
    mac = hmac.new(STEP_KEY, message, hashlib.sha256).digest()[:16]
    return f"s{step}.{plan}.{device}.{expires}.{b64(mac)}"


def sign_results(body: dict) -> None:
    results = body.get("results")
    if not isinstance(results, list) or not STEP_KEY:
        return
    device = body.get("deviceId")
    device = device_hash(device if isinstance(device, str) else "schemathesis")
    plan = b64(struct.pack(">Q", next(PLANS)) + b"sc")
    expires = int(datetime.datetime.now(datetime.timezone.utc).timestamp()) + 600
    for position, result in enumerate(results[:5], start=1):
        if isinstance(result, dict):
            value = result.get("stepId")
            if isinstance(value, str) and 1 <= len(value) <= 64:
                result["stepId"] = step_id(position, plan, device, expires)


@schemathesis.hook
def before_call(context, case, **kwargs):
    operation = context.operation
    if operation is None or not isinstance(case.body, dict):
        return
    method, path = operation.method.upper(), operation.path
    if (method, path) == ("POST", "/calls"):
        value = case.body.get("scheduledAt")
        if isinstance(value, str):
            case.body["scheduledAt"] = within_window(value)
    elif (method, path) == ("POST", "/agent"):
        value = case.body.get("timezone")
        if isinstance(value, str) and value not in ZONES:
            case.body["timezone"] = ZONES[stable(value) % len(ZONES)]
        sign_results(case.body)
