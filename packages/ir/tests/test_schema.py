"""The committed JSON Schemas must match the IR types; changing them needs a version bump."""

import hashlib
import json

import pytest
from pipec_ir import VERSION, dumps
from pipec_ir.schema import committed_path, schema_text

from test_serialize import sample_graph

# sha256 of each committed schema, per released version. A change to the IR types
# changes these: bump pipec_ir.serialize.VERSION, run `python -m pipec_ir.schema --write`,
# and add the new version's digests here (old versions' files stay as they were).
RELEASED = {
    (1, 0): {
        "graph": "d4f6aa8e7b7778c9ab168134bf86e6e22699f80e8ebdeab8e1bda021df254c1d",
        "kernel_plan": "bc872c13f6a5c1d42b2b5971de1f100e41ceeffc82d96c14c56a17104bf9b8a2",
        "program": "3da9b2de0b034a1f922f7832ad1d00fd68e43e4aa8d1470a47961a8f465ac1b9",
    },
    # 1.1: `Size` attribute leaves ({"$size": expr}) and Program.pad_symbols (dynamic shapes)
    (1, 1): {
        "graph": "c0e14a929ce21279dba3c1d5c12ea00cf177fa673834e9dcfd7c6ad30c797cb4",
        "kernel_plan": "b2e76fdbc491db8d845d83ec4cc11f9bd1940b64e082fec9be1d932611196dab",
        "program": "a6dd0433ca0dbd99411613cdba36256ebb7e540a7a014150c80402fd019e4f30",
    },
    # 1.2: the `take` indexing op and the `rand` op; matmul kernels with epilogues; choice groups and
    # `inplace` in Step.attrs (docs/IR.md). Same structure, new meanings.
    (1, 2): {
        "graph": "8961162cf3d81707bf06c63c7cdb400424fc484ededfd287d5961ccdc8eb5a16",
        "kernel_plan": "1247c7bd934d1949333140ed7d134cf8ea662b26cd366cfbd018cb0c1a997f3d",
        "program": "ba9f3c94d39e70587497fa6cffedd1092c4937ee5b85957704485f0c04cceeb6",
    },
    # 1.3: the `scan` op and kernel kind, the `scatter` op and kernel kind (a buffer written by two
    # launches), the `library_mm` / `library_act` matmul alternatives (docs/IR.md). Same structure.
    (1, 3): {
        "graph": "03ce02409e7992dc3a5b48286009a8db706c5265aef814949ffe948505338320",
        "kernel_plan": "ed526cdae47888974924a187101f5fac5922d51d321528cf0ade69fd26465c31",
        "program": "f06a2f8474de4e0822a02fd4dee2591e23d7efe8e205800b899476e036f3382e",
    },
    # 1.4: kernels written in Gluon (the `pingpong` matmul alternative) and the `MAXNREG` launch
    # constant (docs/IR.md). Same structure.
    (1, 4): {
        "graph": "1c213615beaae84e11d71595a3d3f68df3534d8e404dc2fc57e4a84090365145",
        "kernel_plan": "c0f5c4d8b02db2781514f12518105a350b39170d23f9a357a5ab04b056bec9da",
        "program": "89e75fc03cf4d5347cc8fd6b7fe4c4fbe6a8fdd99891af9ca7ab28513a280583",
    },
    # 1.5: the `pipec.mm_padded` extern target (docs/IR.md). Same structure.
    (1, 5): {
        "graph": "b4efcc53d9eeaa7d23bf5b41255874224c1dd73380546a6cc269cb54de391b11",
        "kernel_plan": "7c45f00b1387eb5fe257992cde2c97da5dcf4add1a39d3848179ab1d97970c13",
        "program": "b588bd4a394846a1ece03931c7636582e3ae427c28b3d7108224a9498f9b61d2",
    },
    # 1.6: the `collective` op kind and kernel kind (all_reduce, all_gather_into_tensor,
    # reduce_scatter_tensor, all_to_all_single, wait_tensor; docs/IR.md). Same structure.
    (1, 6): {
        "graph": "7518e83e6774883730f41997e9f406bc676739b82434ac875cda2d383d038867",
        "kernel_plan": "ec7b8f8ec715d59f1b7fc32bf352b0e82b3dccc5251bb7b0279352eb5b47b231",
        "program": "bd4aba14795678d0e6981056e1c893c7bb1bf512aaf38a3dd39584caca8dd955",
    },
    # 1.7: `Graph.writes` and `Program.writes`, in-place updates of inputs kept in the graph
    # (docs/IR.md, "Writes to inputs").
    (1, 7): {
        "graph": "967d8cda32bac1c28c07efddbf635e2260c0ed9c13230087ed50f1369ca29a68",
        "kernel_plan": "91477891f4096d9897cddcc8a6d948b742fbc756fe45fa36fd33570b862fba12",
        "program": "ed303952bb1cf7f536c4a00d13f3ebc88b638431649edf906ca36174889f6426",
    },
    # 1.8: the `pipec.fft_r2c_pairs` / `fft_c2c_pairs` / `fft_c2r_pairs` extern targets, FFTs on
    # complex values held as real pairs (docs/IR.md, "FFTs on real pairs"); no structural change.
    (1, 8): {
        "graph": "5252d15d1b136e17f7219ff2da225d818fafe66aded552b561f943e805f42e0c",
        "kernel_plan": "d55474d008f1f30dadb3f3aa40261fc5b0c55a97b30f46193a002801033784d2",
        "program": "7e2e80d4b2a0409db4d1a245e2e7b2275e12c0943b01246e6d3fb0d2a601dc1c",
    },
    # 1.9: `IntSqrt(n)` in size expressions (docs/IR.md, "Symbolic sizes"); no structural change.
    (1, 9): {
        "graph": "a7960c2af19feb3b8626601d03439ae62721d4e4a7c018c87f1269ad9d040ef7",
        "kernel_plan": "bb96fba4681f80d6fed9c366842ec82941d9544962f02ba4b1a38ccb3a7f1603",
        "program": "4425dc7b125ab8f8341e9cdff62da1393df043fcbe19c38357ba23ae34329b9e",
    },
}


@pytest.mark.parametrize("kind", ["graph", "kernel_plan", "program"])
def test_committed_schema_matches_types(kind):
    path = committed_path(kind)
    assert path.exists(), f"missing {path}: run python -m pipec_ir.schema --write"
    assert path.read_text() == schema_text(kind), (
        f"the {kind} schema changed without a version bump: bump pipec_ir VERSION, "
        "then python -m pipec_ir.schema --write"
    )


@pytest.mark.parametrize("kind", ["graph", "kernel_plan", "program"])
def test_released_schema_is_frozen(kind):
    assert tuple(VERSION) in RELEASED, f"version {VERSION} has no recorded schema digests"
    expected = RELEASED[tuple(VERSION)][kind]
    actual = hashlib.sha256(committed_path(kind).read_bytes()).hexdigest()
    assert actual == expected, f"{kind} schema of released version {VERSION} changed (digest {actual})"


def test_documents_validate_against_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(committed_path("graph").read_text())
    jsonschema.validate(json.loads(dumps(sample_graph())), schema)
