import pytest

from commwatch.settings import Settings, SettingsError


def test_env_and_overrides():
    s = Settings.load(env={"COMMWATCH_HANG_FLOOR_S": "7", "COMMWATCH_TOPIC_PREFIX": "prod"}, kafka_partitions="8")
    assert s.hang_floor_s == 7.0 and s.kafka_partitions == 8
    assert s.topics.calls == "prod.cw.calls.v1"


@pytest.mark.parametrize(
    "env,key",
    [
        ({"COMMWATCH_KAFKA_PARTITIONS": "zero"}, "COMMWATCH_KAFKA_PARTITIONS"),
        ({"COMMWATCH_KAFKA_PARTITIONS": "0"}, "COMMWATCH_KAFKA_PARTITIONS"),
        ({"COMMWATCH_SLOW_IMPACT": "nan"}, "COMMWATCH_SLOW_IMPACT"),
        ({"COMMWATCH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "COMMWATCH_KAFKA_SASL_MECHANISM"),
        ({"COMMWATCH_CLICKHOUSE_DSN": "mysql://x"}, "COMMWATCH_CLICKHOUSE_DSN"),
        ({"COMMWATCH_NO_SUCH_KEY": "1"}, "COMMWATCH_NO_SUCH_KEY"),
        ({"COMMWATCH_LOG_LEVEL": "LOUD"}, "COMMWATCH_LOG_LEVEL"),
    ],
)
def test_bad_values_name_the_key(env, key):
    with pytest.raises(SettingsError, match=key):
        Settings.load(env=env)


def test_secrets_never_in_repr():
    s = Settings.load(env={
        "COMMWATCH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "COMMWATCH_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "COMMWATCH_KAFKA_SASL_USERNAME": "svc", "COMMWATCH_KAFKA_SASL_PASSWORD": "hunter2secret",
        "COMMWATCH_CLICKHOUSE_DSN": "https://u:chpass99@ch.example:8443", "COMMWATCH_CLICKHOUSE_PASSWORD": "pw77x",
    })
    text = repr(s) + str(s) + str(s.describe())
    for secret in ("hunter2secret", "chpass99", "pw77x"):
        assert secret not in text
    conf = s.kafka_config("b:9092")
    assert conf["sasl.password"] == "hunter2secret" and conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"


def test_frozen():
    s = Settings.load(env={})
    with pytest.raises(Exception):
        s.hang_floor_s = 1.0
