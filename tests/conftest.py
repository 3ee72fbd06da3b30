"""Settings shared by every test module.

Hypothesis fails an example that runs longer than its deadline (200 ms by default).
That is a timing assertion, and the suite runs on 2 cores next to a broker and
several worker processes, where one slow example says nothing about the code: a
property test must fail on a wrong answer, never on a busy machine. So no test has a
deadline; each property test still bounds its work with max_examples.
"""

from hypothesis import settings

settings.register_profile("seine", deadline=None)
settings.load_profile("seine")
