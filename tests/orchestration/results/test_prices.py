"""MXBENCH_PRICES (``config.prices``): a price is a finite JSON number of a sane size, or the setting
is refused naming the launcher and the cause, never read as a guess (true as 1.0, inf as a price
that makes the largest size the "cheapest")."""
import json

import pytest

from mxbench import config

NESTED = "[" * 50_000 + "]" * 50_000  # past the JSON parser's recursion limit


@pytest.mark.parametrize("price, cause", [
    ('{"local": {"per_device_hour": true}}', "local's per_device_hour must be a number"),
    ('{"local": {"per_machine_hour": 1e400}}', "local's per_machine_hour must be a number"),  # inf
    ('{"local": {"per_machine_hour": Infinity}}', "local's per_machine_hour must be a number"),
    ('{"local": {"per_machine_hour": NaN}}', "local's per_machine_hour must be a number"),
    ('{"local": {"per_machine_hour": 1e12}}', "local's per_machine_hour must be a number"),
    ('{"local": {"per_machine_hour": -1}}', "local's per_machine_hour must be a number"),
    ('{"local": {"per_machine_hour": "2.5"}}', "local's per_machine_hour must be a number"),
    ('{"local": {"per_machine_hour": 2, "currency": ["EUR"]}}', "local's currency must be a string"),
    ('{"local": {"per_hour": 3}}', "MXBENCH_PRICES must be a JSON object of launcher"),
    ('[1, 2]', "MXBENCH_PRICES must be a JSON object of launcher"),
    ("{not json", "MXBENCH_PRICES must be a JSON object of launcher"),
    (NESTED, "nested too deeply"),
], ids=lambda value: value if len(value) < 80 else "nested")
def test_a_price_that_is_not_a_sane_number_is_refused_by_name(price, cause):
    with pytest.raises(ValueError) as refused:
        config.prices({config.PRICES_ENV: price})
    assert cause in str(refused.value)
    assert len(str(refused.value)) < 500  # the setting is quoted cut short, never whole


def test_sane_prices_are_read():
    given = {"ssh": {"per_machine_hour": 12, "currency": "EUR"}, "kubernetes": {"per_device_hour": 0.0},
             "local": {"per_device_hour": 2.5e5}}
    assert config.prices({config.PRICES_ENV: json.dumps(given)}) == {
        "ssh": {"per_hour": 12.0, "unit": "machine", "currency": "EUR"},
        "kubernetes": {"per_hour": 0.0, "unit": "device", "currency": ""},
        "local": {"per_hour": 2.5e5, "unit": "device", "currency": ""}}
