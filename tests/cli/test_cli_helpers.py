"""The CLI's pure helpers: the SQL guard, durations, safe output paths, config."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import typer

from shardcat._redact import Scrubber, mask_url, scrub
from shardcat.cli.common import load_config, merge_options, parse_duration
from shardcat.cli.dataset_cmds import safe_path
from shardcat.cli.sql_cmd import check_read_only
from shardcat.errors import CatalogError, InvalidKeyError


@pytest.mark.parametrize(
    ("query", "statement"),
    [
        ("SELECT 1", "SELECT 1"),
        ("  select * from records;  ", "  select * from records"),
        ("WITH x AS (SELECT 1) SELECT * FROM x;;", "WITH x AS (SELECT 1) SELECT * FROM x"),
        ("(SELECT 1) UNION (SELECT 2)", "(SELECT 1) UNION (SELECT 2)"),
        ("EXPLAIN SELECT 1", "EXPLAIN SELECT 1"),
        ("VALUES (1, 2)", "VALUES (1, 2)"),
        ("-- c\nSELECT 'a;b' AS \"x;y\" /* ; */", "-- c\nSELECT 'a;b' AS \"x;y\""),
        ("SELECT 1; -- trailing comment", "SELECT 1"),
        ("SELECT ':name', 'it''s'", "SELECT ':name', 'it''s'"),
    ],
)
def test_read_only_statements_pass(query, statement):
    assert check_read_only(query) == statement


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("DELETE FROM records", "DELETE statements are not allowed"),
        ("  update shards set state = 'x'", "UPDATE statements are not allowed"),
        ("SELECT 1; DELETE FROM records", "one statement at a time"),
        ("SELECT 1;\nDROP TABLE records;", "one statement at a time"),
        ("PRAGMA journal_mode = DELETE", "PRAGMA statements are not allowed"),
        ("ATTACH 'x.db' AS x", "ATTACH statements are not allowed"),
        ("/* SELECT */ INSERT INTO datasets VALUES (1)", "INSERT statements"),
        ("'SELECT' ; DELETE FROM records", "one statement"),
        ("SELECT 'unterminated", "unterminated quote"),
        ("SELECT 1 /* unterminated", "unterminated /\\* comment"),
        ("   ;  ", "empty"),
    ],
)
def test_other_statements_are_refused(query, message):
    with pytest.raises(CatalogError, match=message):
        check_read_only(query)


def test_postgres_dollar_quotes_cannot_hide_a_second_statement():
    hidden = "SELECT $$'$$; DELETE FROM records; SELECT $$'$$"
    with pytest.raises(CatalogError, match="one statement"):
        check_read_only(hidden, "postgresql")
    assert check_read_only("SELECT $tag$a;b$tag$", "postgresql") == "SELECT $tag$a;b$tag$"


@pytest.mark.parametrize(
    ("query", "dialect"),
    [
        # SQLite has no dollar quotes ($name is a parameter): the ; between them ends a statement.
        ("SELECT $$ ; DELETE FROM records; SELECT $$", "sqlite"),
        ("SELECT $a$ ; DELETE FROM records; SELECT $a$", "sqlite"),
        # SQLite's block comments end at the first */; PostgreSQL's nest.
        ("SELECT 1 /* /* */ ; DELETE FROM records -- */", "sqlite"),
        ("SELECT 1 /* /* */ */ ; DELETE FROM records", "postgresql"),
    ],
)
def test_each_databases_own_lexical_rules_decide_where_a_statement_ends(query, dialect):
    with pytest.raises(CatalogError, match="one statement"):
        check_read_only(query, dialect)


def test_nested_postgresql_comments_hide_nothing_and_stay_one_statement():
    query = "SELECT 1 /* /* */ ; DELETE FROM records -- */"
    assert check_read_only(query, "postgresql") == "SELECT 1"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("90", 90),
        ("90s", 90),
        ("30m", 1800),
        ("1h", 3600),
        ("2d", 172800),
        ("1.5h", 5400),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "h", "-1h", "1y", "one hour"])
def test_bad_durations_are_refused(text):
    with pytest.raises(typer.BadParameter):
        parse_duration(text)


def test_safe_path_keeps_keys_inside_the_folder(tmp_path):
    assert safe_path(tmp_path, "a/b/img1", "jpg") == tmp_path / "a" / "b" / "img1.jpg"
    for key, entry in [
        ("../x", "jpg"),
        ("a/../../x", "jpg"),
        ("/etc/passwd", "txt"),
        ("a//b", "jpg"),
        ("x", "../../y"),
        ("../..", "jpg"),
    ]:
        with pytest.raises(InvalidKeyError):
            safe_path(tmp_path, key, entry)


def test_config_files_are_checked(tmp_path):
    good = tmp_path / "ok.toml"
    good.write_text('catalog = "sqlite:///x.db"\n[storage_options]\nanon = true\n')
    assert load_config(good) == {"catalog": "sqlite:///x.db", "storage_options": {"anon": True}}
    bad = tmp_path / "bad.toml"
    bad.write_text('catalgo = "typo"\n')
    with pytest.raises(typer.BadParameter, match="unknown key"):
        load_config(bad)
    with pytest.raises(typer.BadParameter, match="no config file"):
        load_config(Path(tmp_path / "missing.toml"))
    assert merge_options({"a": 1, "c": {"x": 1, "y": 2}}, {"b": 2, "c": {"y": 3}}) == {
        "a": 1,
        "b": 2,
        "c": {"x": 1, "y": 3},
    }


# --- secrets -----------------------------------------------------------------


def test_scrub_masks_urls_password_pairs_and_known_secrets_in_any_encoding():
    text = (
        "can't reach postgresql://u:hunter22@db/x; s3://AKIA:s3cr3t/with/slash@bucket/k "
        "and 'https://h/a?X-Amz-Signature=abcd1234&part=1' (host=db password='two words' port=1); "
        "decoded p@ss:w0rd, encoded p%40ss%3Aw0rd"
    )
    out = scrub(text, ["p%40ss:w0rd"])
    for secret in ("hunter22", "s3cr3t", "abcd1234", "two words", "p@ss:w0rd", "p%40ss%3Aw0rd"):
        assert secret not in out, secret
    assert "postgresql://u:***@db/x" in out and "s3://AKIA:***@bucket/k" in out
    assert "part=1" in out and "password=***" in out
    assert scrub("s3://bucket/model@v2/a.shard: no such shard") == (
        "s3://bucket/model@v2/a.shard: no such shard"
    )


def test_command_line_secrets_are_known_before_click_parses_anything():
    from shardcat.cli.app import command_line_secrets

    scrubber = command_line_secrets(
        [
            "-c", "postgres:catpass1@h/db",  # not even a URL
            "-S", "secret=optsecret1",
            "--storage-option=client_kwargs.aws_session_token=tok12345",
            "-Stoken=inline99",
            "-S", "lonelyvalue",  # a malformed pair
            "-S", "client_kwargs.region_name=eu-west-1",  # not a secret
            "inspect", "https://user:urlpass1@h/a.shard?sig=sig12345",
        ],
        {"SHARDCAT_CATALOG": "postgresql://u:envpass1@h/db"},
    )  # fmt: skip
    text = "catpass1 optsecret1 tok12345 inline99 lonelyvalue urlpass1 sig12345 envpass1 eu-west-1"
    assert scrubber(text) == " ".join(["***"] * 8 + ["eu-west-1"])


def test_scrubber_takes_secret_named_options_at_any_depth():
    s = Scrubber()
    s.add_options(
        {
            "key": "AKIAEXAMPLE",
            "client_kwargs": {"endpoint_url": "http://u:endpass1@h:9000", "region_name": "eu"},
            "credentials": {"client_id": "cid-1234"},  # everything under a secret name
            "use_listings_cache": "false",
        }
    )
    assert s.secrets == {"AKIAEXAMPLE", "endpass1", "cid-1234"}
    assert mask_url("https://u:p4ss@h/x?token=t0k&a=1") == "https://u:***@h/x?token=***&a=1"


def test_copy_destination_secrets_are_known_too():
    from shardcat.cli.app import command_line_secrets

    scrubber = command_line_secrets(
        [
            "copy", "train", "s3://b/x",
            "--to-catalog", "postgresql://u:topass11@h/db",
            "--to-catalog=postgres:topass22@h/db",
            "--dest-option", "secret=dstsecret1",
            "--dest-option=key=dstkey22",
        ],
        {},
    )  # fmt: skip
    assert scrubber("topass11 topass22 dstsecret1 dstkey22 train") == "*** *** *** *** train"


def test_the_suggested_command_is_the_one_the_user_ran(tmp_path, monkeypatch):
    """`.venv/bin/shardcat demo` from a checkout suggests `.venv/bin/shardcat ...`, not `shardcat`."""
    import os
    import sys

    from shardcat.cli.invocation import command_name

    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    script = venv_bin / "shardcat"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [".venv/bin/shardcat", "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name() == ".venv/bin/shardcat"
    monkeypatch.setenv("PATH", f"{venv_bin}{os.pathsep}/usr/bin")
    assert command_name() == "shardcat"
    monkeypatch.setattr(sys, "argv", ["/x/shardcat/__main__.py", "demo"])
    assert command_name() == f"{os.path.basename(sys.executable)} -m shardcat"
