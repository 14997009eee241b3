"""PTX / SASS inspection without a GPU, the `python -m nbspmm sass` command, and the teaching kernels'
SASS."""
import os

import pytest
from numba import cuda, types

import ptx_snippets as ps
from nbspmm.cli import main
from nbspmm.kernels import registry
from ptx_snippets import inspect as insp

TEACHING = ("mbarrier_ring", "tma_copy_2d", "tma_wgmma_tile", "tma_wgmma_tile_mn", "timeline")


def test_tools_are_found():
    for tool in ("ptxas", "nvdisasm"):
        assert os.access(insp.tool_path(tool), os.X_OK)
    assert insp.ptxas_version() >= (12, 0)


def _tiny(out):
    out[0] = ps.lane_id()


def test_pipeline_and_ptx_version_rewrite():
    ptx, _ = insp.compile_for_hopper(_tiny, (types.uint32[::1],))
    assert ".target sm_90a" in ptx
    newest = insp.max_ptx_isa()
    if newest is None:
        pytest.skip(f"ptxas {insp.ptxas_version()} is not in the PTX ISA table")
    too_new = insp._VERSION_LINE.sub(f".version {newest[0]}.{newest[1] + 5}", ptx, count=1)
    assembled = insp.assemble(too_new)
    assert any("rewritten" in note for note in assembled.notes)
    sass = insp.disassemble(assembled.cubin)
    assert "S2R" in insp.instructions(sass) or any(op.startswith("S2R") for op in insp.instructions(sass))
    assert assembled.info.registers is not None


def test_ptxas_refusal_is_reported():
    with pytest.raises(RuntimeError, match="ptxas refused"):
        insp.assemble(".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k() { bogus.instr; }\n")


SAMPLE_SASS = """
        /*0190*/                   SYNCS.EXCH.64 URZ, [UR6], UR4 ;
        /*02a0*/               @P0 ELECT P1, URZ, PT ;
        /*02b0*/              @!P1 UTMALDG.2D [UR8], [UR6] ;
        /*0660*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4].tnspB, RZ, !UPT ;
        /*0670*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4].tnspB, R24 ;
"""


def test_instruction_parsing_and_check():
    assert insp.instructions(SAMPLE_SASS) == {"SYNCS.EXCH.64", "ELECT", "UTMALDG.2D", "HGMMA.64x128x16.F32.BF16"}
    assert insp.mnemonic_counts(SAMPLE_SASS)["HGMMA"] == 2
    insp.check_sass(SAMPLE_SASS, ["HGMMA.64x128", "UTMALDG.2D", "SYNCS"])
    with pytest.raises(insp.SassCheckError, match=r"lacks \['UTMASTG', 'HGMMA.64x64'\]"):
        insp.check_sass(SAMPLE_SASS, ["UTMASTG", "HGMMA.64x64", "ELECT"])


def test_inspect_kernel_is_cached():
    first = insp.inspect_kernel(_tiny, (types.uint32[::1],))
    assert insp.inspect_kernel(cuda.jit(_tiny), (types.uint32[::1],)) is first      # dispatcher or function
    assert insp.sass_of(_tiny, (types.uint32[::1],)) == first.sass


@pytest.mark.parametrize("name", TEACHING)
def test_teaching_kernels_hold_their_instructions(name):
    from nbspmm.sass import inspect_registered

    spec = registry.get(name)
    result = inspect_registered(name)
    insp.check_sass(result.sass, spec.expected_sass)
    assert result.info.spill_stores == 0


def test_cli_prints_summary_then_sass_with_short_symbols(capsys):
    assert main(["sass", "tma_wgmma_tile"]) == 0
    out = capsys.readouterr().out
    assert "HGMMA.64x64x16.F32.BF16" in out
    first = out.splitlines()[0]
    assert first.startswith("tma_wgmma_tile [sm_90a]:") and "HGMMA 4" in first and "all present" in first
    assert ".global         nbspmm.kernels.teaching.build_tma_wgmma_tile.<locals>.tma_wgmma_tile\n" in out
    assert "_ZN" not in out and max(len(line) for line in out.splitlines()) < 300
    assert main(["sass", "tma_wgmma_tile", "--mangled"]) == 0
    assert ".global         _ZN6nbspmm7kernels8teaching20build_tma_wgmma_tile" in capsys.readouterr().out


def test_cli_grep_ptx_and_list(capsys):
    assert main(["sass", "tma_wgmma_tile_mn", "--grep", "HGMMA"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("tma_wgmma_tile_mn [sm_90a]:")
    assert all("HGMMA" in line for line in lines[1:]) and len(lines) == 5
    assert main(["sass", "mbarrier_ring", "--ptx", "--grep", r"mbarrier\.init"]) == 0
    assert "mbarrier.init.shared::cta.b64" in capsys.readouterr().out
    assert main(["sass", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in TEACHING)


def test_cli_unknown_kernel(capsys):
    assert main(["sass", "no-such-kernel"]) == 2
    assert "known kernels" in capsys.readouterr().err


def test_gpu_test_kernels_compile_for_sm90a():
    """The kernels tests/gpu/test_ptx_*.py launch, compiled here without a GPU, so the H200 run cannot
    fail on a typing or assembly error."""
    from tests.gpu import ptx_cases

    for fn, sig, opts in ptx_cases.all_sources():
        result = insp.inspect_kernel(fn, sig, **opts)
        assert result.info.registers is not None, fn.__name__


def test_fingerprint_hashes_the_instructions_not_their_addresses():
    moved = "\n".join(line.replace("/*06", "/*16") for line in SAMPLE_SASS.splitlines())
    assert insp.fingerprint(moved) == insp.fingerprint(SAMPLE_SASS)
    assert len(insp.fingerprint(SAMPLE_SASS)) == 12
    changed = SAMPLE_SASS.replace("R24, gdesc[UR4].tnspB, R24", "R26, gdesc[UR4].tnspB, R26")
    assert insp.fingerprint(changed) != insp.fingerprint(SAMPLE_SASS)



def test_fingerprint_ignores_symbol_names():
    call = "        /*0100*/                   RET.REL.NODEC R28 `(_ZN6kernelB2v1) ;"
    other = "        /*0100*/                   RET.REL.NODEC R28 `(_ZN6kernelB3v84) ;"
    assert insp.fingerprint(call) == insp.fingerprint(other)
    assert insp.fingerprint(call) != insp.fingerprint(call.replace("R28", "R30"))
