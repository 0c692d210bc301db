import os
import shutil
from pathlib import Path

from goondan.bundle.cache import load_bundle_cached

QUICKSTART = Path(__file__).resolve().parents[3] / "configs" / "quickstart"


def test_unchanged_bundle_is_reused_and_a_change_reloads(tmp_path: Path) -> None:
    bundle_dir = tmp_path / "b"
    shutil.copytree(QUICKSTART, bundle_dir)
    first = load_bundle_cached(bundle_dir)
    assert load_bundle_cached(bundle_dir) is first
    main = bundle_dir / "goondan.yaml"
    main.write_text(main.read_text().replace("maxStepsPerTurn: 8", "maxStepsPerTurn: 9"))
    os.utime(main, ns=(1, 1))  # a different mtime (the size is the same) is a change
    second = load_bundle_cached(bundle_dir)
    assert second is not first
    assert second.select_swarm(None).spec.policy.max_steps_per_turn == 9
