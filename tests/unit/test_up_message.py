"""What `farm up` tells the user about reaching it: only what is true of `farm.config.from_env`."""

from __future__ import annotations

from farm.app.cli.up import how_clients_find_it
from farm.config import Settings

URL = "redis://127.0.0.1:6390/0"


def test_a_farm_in_the_default_data_dir_is_found_by_clients_on_their_own():
    message = how_clients_find_it(Settings(redis_url=URL))
    assert message.startswith("clients here find it on their own")
    assert "FARM_DATA_DIR" not in message


def test_a_farm_in_another_data_dir_tells_clients_to_export_farm_data_dir(tmp_path):
    message = how_clients_find_it(Settings(redis_url=URL, namespace="ns1", data_dir=str(tmp_path)))
    assert "on their own" not in message
    assert f"export FARM_DATA_DIR={tmp_path}\n" in message
    assert f"export FARM_REDIS_URL={URL} FARM_NAMESPACE=ns1" in message


def test_the_data_dir_told_is_absolute_so_a_client_anywhere_reads_the_same_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = how_clients_find_it(Settings(redis_url=URL, data_dir="relative"))
    told = message.split("export FARM_DATA_DIR=")[1].split("\n")[0]
    assert told == str(tmp_path / "relative")  # absolute: a client elsewhere reads the same directory
