import pytest


@pytest.fixture
def check_memos(monkeypatch):
    """The legality memos (check_memo.py) fusion makes in this test, one per `fuse_graph` call."""
    from pipec_fusion import check_memo, engine

    memos = []

    class Recorded(check_memo.CheckMemo):
        def __init__(self):
            super().__init__()
            memos.append(self)

    monkeypatch.setattr(engine, "CheckMemo", Recorded)
    return memos
