"""Unit: secrets never leave (issue 23.8) and tuning flags are never taken for secrets (24.5).

The 30 planted secrets of issues 23 and 36 go through the one spec the controller shows (``show
--json``, the report) and the provenance the agent records; the engines' real flag lists (read
as shipped: tunelab/common/engine_flags/) check that no tuning flag loses its
value."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import structlog

from tunelab.agent.runs.provenance import redact_argv, redact_env
from tunelab.common import engineflags
from tunelab.common.logsetup import configure_logging
from tunelab.common.redaction import REDACTED, Redactor, secret_name, spec_redactor
from tunelab.controller.spec import expand_text

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAplantedPEMbody0123456789\n"
    "-----END RSA PRIVATE KEY-----"
)
# name -> the secret planted under it; every one must be gone from what leaves
PLANTED = {
    "HF_TOKEN": "hf_plantedHFtoken001",
    "OPENAI_API_KEY": "sk-planted-openai-002",
    "AWS_SECRET_ACCESS_KEY": "planted/aws/secret003",
    "DB_PASSWORD": "planted-dbpass-004",
    "GITHUB_TOKEN": "ghp_planted005",
    "SLACK_BOT_TOKEN": "xoxb-planted-006",
    "ANTHROPIC_API_KEY": "sk-ant-planted-007",
    "SESSION_COOKIE": "planted-cookie-008",
    "GCP_CREDENTIALS": "planted-gcp-cred-009",
    "CLIENT_SECRET": "planted-client-secret-010",
    "--api-key": "planted-api-key-011",
    "--hf-token": "hf_planted_flag_012",
    "--admin-api-key": "planted-admin-013",
    "--ssl-keyfile-password": "planted-sslpw-014",
    "--auth-token": "planted-authtok-015",
    "REFRESH_TOKEN": "planted-refresh-016",
    # the 12 that passed name-based redaction on the old code
    "DATABASE_URL": "planted-dburl-pw-017",  # postgresql://tunelab:<this>@db/x
    "--db-url": "planted-dbflag-pw-018",  # postgresql://u:<this>@db/x
    "url in argv": "planted-userpw-019",  # https://bob:<this>@mirror/models
    "-k": "planted-dash-k-020",
    "Authorization": "planted-bearer-021",  # -H "Authorization: Bearer <this>"
    "PGPASS": "planted-pgpass-022",
    "REDIS_URL": "planted-redis-pw-023",  # redis://:<this>@cache:6379/0
    "SENTRY_DSN": "plantedsentrykey024",  # https://<this>@o1.ingest.sentry.io/1
    "GH_PAT": "github_pat_planted025",
    "MY_PASS": "planted-mypass-026",
    "PEM": "MIIEowIBAAKCAQEAplantedPEMbody0123456789",
    "SIGNING_PASSPHRASE": "planted-passphrase-028",
    # the 2 shown in clear in round 4 (issue 36.6)
    "AZURE_OPENAI_KEY": "plantedazurekey029",
    "Slack webhook": "T0PLANTED/B0PLANTED/plantedslackhook030",  # hooks.slack.com/services/<this>
}


def planted_spec() -> str:
    p = PLANTED
    return f"""
name: secrets
redact: [INTERNAL_SEED]
server:
  command: [vllm, serve, /m, --api-key, {p["--api-key"]}, "--hf-token={p["--hf-token"]}",
            --admin-api-key, {p["--admin-api-key"]}, --ssl-keyfile-password,
            {p["--ssl-keyfile-password"]}, --auth-token, {p["--auth-token"]},
            --db-url, "postgresql://u:{p["--db-url"]}@db/x",
            --download-url, "https://bob:{p["url in argv"]}@mirror/models",
            --max-num-batched-tokens, "8192", --tokens-per-chunk, "512"]
  flags: {{--port: "{{port}}", --max-total-tokens: 65536, -k: {p["-k"]}}}
  engine_version: "0.0-planted"  # flags of no one version: none is checked (engineflags)
  env:
    HF_TOKEN: {p["HF_TOKEN"]}
    OPENAI_API_KEY: {p["OPENAI_API_KEY"]}
    AWS_SECRET_ACCESS_KEY: {p["AWS_SECRET_ACCESS_KEY"]}
    DB_PASSWORD: {p["DB_PASSWORD"]}
    GITHUB_TOKEN: {p["GITHUB_TOKEN"]}
    SLACK_BOT_TOKEN: {p["SLACK_BOT_TOKEN"]}
    ANTHROPIC_API_KEY: {p["ANTHROPIC_API_KEY"]}
    SESSION_COOKIE: {p["SESSION_COOKIE"]}
    GCP_CREDENTIALS: {p["GCP_CREDENTIALS"]}
    CLIENT_SECRET: {p["CLIENT_SECRET"]}
    REFRESH_TOKEN: {p["REFRESH_TOKEN"]}
    DATABASE_URL: "postgresql://tunelab:{p["DATABASE_URL"]}@db:5432/x"
    PGPASS: {p["PGPASS"]}
    REDIS_URL: "redis://:{p["REDIS_URL"]}@cache:6379/0"
    SENTRY_DSN: "https://{p["SENTRY_DSN"]}@o1.ingest.sentry.io/1"
    GH_PAT: {p["GH_PAT"]}
    MY_PASS: {p["MY_PASS"]}
    TLS_KEY_PEM: {json.dumps(PEM)}
    SIGNING_PASSPHRASE: {p["SIGNING_PASSPHRASE"]}
    AZURE_OPENAI_KEY: {p["AZURE_OPENAI_KEY"]}
    ALERTS: "https://hooks.slack.com/services/{p["Slack webhook"]}"
    INTERNAL_SEED: spec-listed-secret
    MAX_TOKENS_HINT: "4096"
    ECHO: "the token again: {p["HF_TOKEN"]}"
  ready: {{model: m}}
benchmark:
  command: [curl, -H, "Authorization: Bearer {p["Authorization"]}", "http://127.0.0.1:{{port}}"]
  result_file: out.json
"""


def test_the_30_planted_secrets_never_leave_in_the_shown_spec() -> None:
    [experiment] = expand_text(planted_spec())
    shown = json.dumps(spec_redactor(experiment.spec).document(experiment.spec))
    leaked = [name for name, value in PLANTED.items() if value in shown]
    assert leaked == []
    assert len(PLANTED) == 30
    assert "spec-listed-secret" not in shown  # a name the spec lists under redact:
    # ...and the tuning flags keep their values
    spec = json.loads(shown)
    assert spec["server"]["flags"]["--max-total-tokens"] == 65536
    assert spec["server"]["env"]["MAX_TOKENS_HINT"] == "4096"
    command = spec["server"]["command"]
    assert command[command.index("--max-num-batched-tokens") + 1] == "8192"
    assert command[command.index("--tokens-per-chunk") + 1] == "512"
    assert "postgresql://u:<redacted>@db/x" in command
    assert spec["server"]["env"]["REDIS_URL"] == "redis://:<redacted>@cache:6379/0"
    assert spec["server"]["env"]["ECHO"] == f"the token again: {REDACTED}"
    assert spec["server"]["env"]["ALERTS"] == f"https://hooks.slack.com/services/{REDACTED}"


def test_the_planted_secrets_never_leave_in_the_agents_provenance() -> None:
    [experiment] = expand_text(planted_spec())
    server = experiment.spec["server"]
    argv = [*server["command"], "--max-num-batched-tokens", "8192"]
    recorded = json.dumps([redact_argv(argv), redact_env(server["env"])])
    for name in ("--api-key", "--hf-token", "--db-url", "url in argv", "HF_TOKEN", "PGPASS"):
        assert PLANTED[name] not in recorded, name
    assert PEM not in recorded and PLANTED["PEM"] not in recorded


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_engine_flag_but_a_credential_is_taken_for_a_secret(engine: str) -> None:
    found = engineflags.flags_for(engine)
    assert found is not None
    flags = sorted(found[1])
    assert len(flags) > 300  # the whole list, not a sample
    secret = sorted(f for f in flags if secret_name(f))
    expected = {
        "vllm": ["--api-key", "--hf-token"],
        "sglang": ["--admin-api-key", "--api-key", "--ssl-keyfile-password"],
    }
    assert secret == expected[engine]
    with_token = [f for f in flags if "token" in f and f != "--hf-token"]
    assert len(with_token) > 10
    for flag in with_token:  # a value after any of them stays, as flag value and as flag=value
        assert redact_argv([flag, "4096", f"{flag}=8192"]) == [flag, "4096", f"{flag}=8192"]


@pytest.mark.parametrize(
    "name",
    ["--max-num-batched-tokens", "--max-total-tokens", "--tokens-per-chunk", "MAX_TOKENS_HINT",
     "--max-prompt-adapter-token", "--bucket-time-to-first-token", "--tokenizer",
     "--allow-credentials", "--forward-pass-metrics-ipc-name", "--watermark-key",
     "--ssl-keyfile", "NCCL_P2P_LEVEL", "--kv-cache-dtype", "KEY_COUNT"],
)  # fmt: skip
def test_tuning_names_are_not_secrets(name: str) -> None:
    assert not secret_name(name)


def test_a_switch_named_like_a_secret_hides_nothing_after_it() -> None:
    argv = ["x", "--hf-token", "--max-num-seqs", "8"]  # vLLM's --hf-token takes no value here
    assert redact_argv(argv) == argv


def test_known_values_are_masked_anywhere_also_url_quoted() -> None:
    redactor = Redactor(known=["tok/en+with=odd chars"])
    text = "url https://h/?t=tok%2Fen%2Bwith%3Dodd%20chars and tok/en+with=odd chars"
    assert redactor.text(text) == f"url https://h/?t={REDACTED} and {REDACTED}"


def test_the_log_masks_token_file_contents_and_secrets_by_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("daemon-token-value-123\n")
    import io

    out = io.StringIO()
    redaction = configure_logging("info", json=True, stream=out)
    try:
        redaction.learn_files([token])
        log = structlog.get_logger("t")
        log.info("e", note="got daemon-token-value-123", url="postgresql://u:pw123456@db/x")
        log.info("started", argv=["vllm", "--api-key", "planted-key-1"], HF_TOKEN="hf_x")
        logging.getLogger("grpc").warning("header authorization: Bearer abcdef123456")
    finally:
        configure_logging("info")
    text = out.getvalue()
    for secret in ("daemon-token-value-123", "pw123456", "planted-key-1", "hf_x", "abcdef123456"):
        assert secret not in text
    assert text.count(REDACTED) >= 5


@pytest.mark.parametrize(
    ("name", "secret"),
    [("AZURE_OPENAI_KEY", True), ("STRIPE_KEY", True), ("MISTRAL_KEY", True),
     ("KEY", False), ("KEY_COUNT", False), ("MAX_KEY", False), ("AWS_ACCESS_KEY_ID", False),
     ("--watermark-key", False), ("--openai-key", False), ("sort_key", False)],
)  # fmt: skip
def test_an_upper_case_variable_ending_key_is_a_secret_a_flag_needs_a_qualifier(
    name: str, secret: bool
) -> None:
    assert secret_name(name) is secret


@pytest.mark.parametrize(
    ("url", "shown"),
    [("https://hooks.slack.com/services/T01/B02/abcdefSECRET",
      f"https://hooks.slack.com/services/{REDACTED}"),
     ("https://hooks.slack.com/workflows/T01/A02/123/abcdefSECRET",
      f"https://hooks.slack.com/workflows/{REDACTED}"),
     ("https://discord.com/api/webhooks/123456/abcdefSECRET",
      f"https://discord.com/api/webhooks/{REDACTED}"),
     ("https://contoso.webhook.office.com/webhookb2/abc@def/IncomingWebhook/xyz/abcdefSECRET",
      f"https://contoso.webhook.office.com/webhookb2/{REDACTED}")],
)  # fmt: skip
def test_a_webhook_url_keeps_its_host_and_loses_its_path_also_where_repeated(
    url: str, shown: str
) -> None:
    redactor = Redactor.for_document({"SLACK_URL": url, "note": f"posts to {url}"})
    assert redactor.document({"SLACK_URL": url}) == {"SLACK_URL": shown}
    path = url.split("/", 5)[5] if "/api/" in url else url.split("/", 4)[4]
    assert redactor.text(f"curl -d x {path}") == f"curl -d x {REDACTED}"  # learned as a value
    assert Redactor().argv(["--alerts", url]) == ["--alerts", shown]


def test_a_process_redactor_honours_the_specs_redact_names() -> None:
    argv = ["engine", "--internal-seed", "listed-secret-value", "--max-num-seqs", "8"]
    env = {"SEED_PHRASE": "env-listed-value", "ECHO": "env-listed-value again"}
    redactor = Redactor.for_process(argv, env, names=["INTERNAL_SEED", "SEED_PHRASE"])
    assert redactor.argv(argv) == ["engine", "--internal-seed", REDACTED, "--max-num-seqs", "8"]
    assert redactor.env(env) == {"SEED_PHRASE": REDACTED, "ECHO": f"{REDACTED} again"}
    assert Redactor.for_process(argv, env).argv(argv) == argv  # without the names: nothing
