"""Four torchrl client scripts of ``RayCollector``: where pytorch/rl keeps them, our patches.

Each :class:`ClientScript` names a script in a pytorch/rl tree (a checkout, or an unpacked
source distribution), the files it needs beside it, the patches that let it run on a 2-core
machine without a GPU and with today's packages, and its ``RayCollector`` import line, which
the tdscheme run swaps for ``from tdscheme import RayCollector``. The patches were written
against pytorch/rl commit 373c31a85b30be19e5e1db5c466f25d15522ac98 (torchrl 0.14.0), and
checked with torchrl 0.14.1 and Ray 2.60 installed.
"""

from __future__ import annotations

from dataclasses import dataclass

from patching import Patch

#: The line a user writes instead of the script's torchrl import.
TDSCHEME_IMPORT = "from tdscheme import RayCollector"
#: Where pytorch/rl keeps the three example scripts, and the IMPALA implementation.
EXAMPLES = "examples/distributed/collectors/multi_nodes"
IMPALA = "sota-implementations/impala"
SMALL = "for a 2-core machine"


@dataclass(frozen=True)
class ClientScript:
    """One torchrl client script and how it is run here.

    Attributes:
        name: the script's stem, as ``--scripts`` selects it.
        folder: its folder in a pytorch/rl tree.
        files: the files read from that folder of the given checkout at run time, into a
            temporary directory (none is kept here); the first is the script that runs.
        torchrl_import: its ``RayCollector`` import line (after the patches), without indentation.
        patches: the changes applied for both runs, in order.
        modules: our own modules placed beside the script at run time (the patches import them).
        args: command-line arguments (hydra overrides for IMPALA).
        needs: optional modules it imports; a run without them is a ``skip``.
        timeout_s: how long one run may take.
    """

    name: str
    folder: str
    files: tuple[str, ...]
    torchrl_import: str
    patches: tuple[Patch, ...] = ()
    modules: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    timeout_s: float = 600.0

    @property
    def script(self) -> str:
        """The file that runs."""
        return self.files[0]


def _ray_collect() -> ClientScript:
    patch = Patch(
        "ray_collect.py", "fewer-frames", "total_frames=10000,", "total_frames=2000,",
        f"10,000 frames shrunk to 2,000 (10 batches of 200) {SMALL}",
    )  # fmt: skip
    return ClientScript(
        "ray_collect", EXAMPLES, ("ray_collect.py",),
        "from torchrl.collectors.distributed.ray import RayCollector", (patch,), timeout_s=300.0,
    )  # fmt: skip


def _ray_train() -> ClientScript:
    f = "ray_train.py"
    keys_reason = (
        "torchrl 0.14.1's ClipPPOLoss rejects advantage_key= and value_target_key= "
        "(\"use .set_keys(<key>='some_key') instead\")"
    )
    patches = (
        Patch(
            f, "fewer-frames", "total_frames = 50_000 // frame_skip",
            "total_frames = 2_000 // frame_skip",
            f"50,000 frames shrunk to 2,000 (2 batches of 1,000) {SMALL}",
        ),
        Patch(
            f, "no-gpu", '"num_gpus": 0.1,', '"num_gpus": 0,',
            "each collector asks Ray for 0.1 GPU, which a machine without one never grants",
        ),
        Patch(
            f, "no-advantage-key-argument", '        advantage_key="advantage",\n', "", keys_reason,
        ),
        Patch(
            f, "no-value-target-key-argument",
            "        value_target_key=advantage_module.value_target_key,\n", "", keys_reason,
        ),
        Patch(
            f, "loss-keys-through-set-keys", "    loss_module.make_value_estimator(gamma=0.99)\n",
            '    loss_module.set_keys(advantage="advantage", '
            "value_target=advantage_module.value_target_key)\n"
            "    loss_module.make_value_estimator(gamma=0.99)\n",
            "the same two keys, set the way torchrl 0.14.1 accepts",
        ),
        Patch(
            f, "evaluate-deterministic", "set_exploration_type(ExplorationType.MODE)",
            "set_exploration_type(ExplorationType.DETERMINISTIC)",
            "torchrl 0.14.1 raises 'TanhNormal has not analytical mode' under MODE and names "
            "DETERMINISTIC",
        ),
    )  # fmt: skip
    return ClientScript(
        "ray_train", EXAMPLES, (f,), "from torchrl.collectors.distributed.ray import RayCollector",
        patches, needs=("matplotlib", "mujoco", "imageio"),
    )  # fmt: skip


def _ray_buffer_infra() -> ClientScript:
    # 600 frames already: it runs as pytorch/rl has it, bar the import swap.
    return ClientScript(
        "ray_buffer_infra", EXAMPLES, ("ray_buffer_infra.py",),
        "from torchrl.collectors.distributed.ray import RayCollector", timeout_s=300.0,
    )  # fmt: skip


#: IMPALA shrunk for 2 cores through hydra overrides: 2 workers, 8 updates, no wandb.
IMPALA_OVERRIDES = (
    "collector.num_workers=2",
    "collector.total_frames=1920",
    "loss.batch_size=2",
    "logger.backend=null",
    "ray_init_config.num_cpus=2",
    "remote_worker_resources.num_gpus=0",
    "remote_worker_resources.memory=536870912",
)


def _impala() -> ClientScript:
    f, u = "impala_multi_node_ray.py", "utils.py"
    named = (
        "Collector(backend='ray') builds torchrl's RayCollector inside, so the script has no "
        "import to swap; this builds that class by name, with the arguments the dispatch passes"
    )
    patches = (
        Patch(
            f, "no-ray-storage", '        "storage": cfg.ray_init_config.storage,\n', "",
            "Ray 2.60's ray.init() no longer accepts storage=",
        ),
        Patch(
            f, "import-ray-collector", "    from torchrl.collectors import Collector\n",
            "    from torchrl.collectors import Collector\n"
            "    from torchrl.collectors.distributed import RayCollector\n",
            named,
        ),
        Patch(
            f, "build-ray-collector", "collector = Collector(", "collector = RayCollector(", named,
        ),
        Patch(
            f, "one-env-per-worker",
            "create_env_fn=make_env(cfg.env.env_name, device, gym_backend=cfg.env.backend),",
            "create_env_fn=[make_env(cfg.env.env_name, device, gym_backend=cfg.env.backend)]"
            " * num_workers,",
            "the dispatch hands RayCollector one env per collector",
        ),
        Patch(f, "no-backend-argument", '        backend="ray",\n', "", named),
        Patch(
            f, "backend-options-as-arguments", "backend_options={", "**{",
            "the dispatch passes backend_options to RayCollector as keyword arguments",
        ),
        Patch(
            f, "report-line",
            '    torchrl_logger.info(f"Training took {execution_time:.2f} seconds to finish")\n',
            '    torchrl_logger.info(f"Training took {execution_time:.2f} seconds to finish")\n'
            '    print("impala-report: " + __import__("json").dumps({"frames": collected_frames'
            ' // frame_skip, "updates": num_network_updates, "seconds": execution_time}))\n',
            "one JSON line (agent steps, updates, seconds) for benchmarks/impala.py",
        ),
        Patch(
            u, "import-torch-resize", "import torch.optim\n",
            "import torch.optim\nfrom torch_resize import resize_transform\n",
            "torchrl's Resize needs torchvision, whose PyPI wheels fail to load beside torch's "
            "CPU wheel",
        ),
        Patch(
            u, "resize-with-torch", "Resize(84, 84)", "resize_transform(84, 84)",
            "the same 84x84 bilinear resize on torch alone (torch_resize.py here)",
        ),
    )  # fmt: skip
    return ClientScript(
        "impala_multi_node_ray", IMPALA, (f, u, "config_multi_node_ray.yaml"),
        "from torchrl.collectors.distributed import RayCollector", patches,
        modules=("torch_resize.py",), args=IMPALA_OVERRIDES, needs=("hydra", "ale_py"),
    )  # fmt: skip


def client_scripts() -> tuple[ClientScript, ...]:
    """The four scripts, in the order the runner runs them.

    Returns:
        ``ray_collect``, ``ray_train``, ``ray_buffer_infra`` and ``impala_multi_node_ray``.

    Example:
        >>> [c.name for c in client_scripts()][:2]
        ['ray_collect', 'ray_train']
    """
    return (_ray_collect(), _ray_train(), _ray_buffer_infra(), _impala())


def required_files() -> list[str]:
    """Every file the four scripts need from a pytorch/rl tree, relative to its root.

    Example:
        >>> required_files()[0]
        'examples/distributed/collectors/multi_nodes/ray_collect.py'
    """
    return [f"{c.folder}/{name}" for c in client_scripts() for name in c.files]
