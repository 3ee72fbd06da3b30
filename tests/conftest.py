"""Settings shared by every test module.

Hypothesis fails an example that runs longer than its deadline (200 ms by default).
That is a timing assertion, and the suite runs on 2 cores next to a broker and
several worker processes, where one slow example says nothing about the code: a
property test must fail on a wrong answer, never on a busy machine. So no test has a
deadline; each property test still bounds its work with max_examples.
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("seine", deadline=None)
settings.load_profile("seine")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--broker",
        choices=("tansu", "kafka"),
        default="tansu",
        help="the broker every integration test runs on: the embedded Tansu (default) or "
        "a one-node Apache Kafka (streams/kafka/local.py; Java 17+ and Maven or cached jars)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Read by tests/integration/conftest.py's fixtures and crawl_env, also in
    # xdist workers (each gets the same command line).
    os.environ["SEINE_TEST_BROKER"] = config.getoption("--broker")
