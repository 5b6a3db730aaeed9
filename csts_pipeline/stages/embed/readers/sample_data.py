"""The embedded sample: a deterministic, generated image-caption set in COCO JSON format.

Images are small JPEGs whose colours and shapes follow their scene, so neighbours under a CLIP image tower
are not arbitrary; captions read like COCO's (several per image, most of 50 characters or more) and vary
their wording across an image's captions, as COCO annotators do. Generated on first use, never downloaded.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

from csts_pipeline.pipeline.shards import write_atomic

N_IMAGES = 240
CAPTIONS_PER_IMAGE = 5
IMAGE_SIZE = 96

# scene: (subjects, actions, shape colour)
_SCENES = {
    "dog": (
        ["a brown dog", "a small puppy", "a large black dog", "a fluffy white dog", "an excited terrier"],
        [
            "running across",
            "playing fetch on",
            "lying down on",
            "chasing a red ball across",
            "sniffing around",
        ],
        (150, 90, 40),
    ),
    "surf": (
        [
            "a surfer in a wetsuit",
            "a young woman",
            "a man on a surfboard",
            "an experienced surfer",
            "a teenager",
        ],
        [
            "riding a wave near",
            "paddling out past",
            "balancing on a board by",
            "catching a big wave off",
            "carrying his board toward",
        ],
        (30, 90, 200),
    ),
    "kitchen": (
        ["a woman in an apron", "two cooks", "an elderly man", "a chef wearing a white hat", "a little girl"],
        [
            "preparing vegetables in",
            "baking bread inside",
            "washing dishes within",
            "stirring a large pot in",
            "slicing tomatoes at",
        ],
        (220, 220, 210),
    ),
    "train": (
        [
            "a long freight train",
            "an old steam locomotive",
            "a red passenger train",
            "a commuter train",
            "a yellow engine",
        ],
        [
            "pulling into",
            "traveling slowly past",
            "waiting on the tracks beside",
            "crossing a bridge over",
            "leaving",
        ],
        (200, 40, 40),
    ),
    "giraffe": (
        ["a tall giraffe", "two giraffes", "a baby giraffe", "a herd of zebras", "an adult elephant"],
        [
            "eating leaves from trees in",
            "walking slowly through",
            "standing together near",
            "grazing quietly in",
            "drinking water at",
        ],
        (210, 170, 60),
    ),
    "tennis": (
        [
            "a tennis player",
            "a woman holding a racket",
            "a professional athlete",
            "a boy in white shorts",
            "an older gentleman",
        ],
        [
            "swinging hard at a ball on",
            "serving the ball across",
            "waiting for a return on",
            "jumping high above",
            "running toward the net of",
        ],
        (60, 170, 60),
    ),
    "pizza": (
        [
            "a large pepperoni pizza",
            "a cheesy homemade pizza",
            "several slices of pizza",
            "a fresh veggie pizza",
            "a thin crust pizza",
        ],
        [
            "sitting on a wooden table in",
            "being served on a plate at",
            "cooling on a metal tray inside",
            "topped with olives at",
            "waiting to be eaten in",
        ],
        (230, 120, 30),
    ),
    "bus": (
        [
            "a double decker bus",
            "a crowded city bus",
            "a blue school bus",
            "an empty tour bus",
            "a public transit bus",
        ],
        [
            "driving down a street in",
            "parked at a stop near",
            "turning a corner through",
            "stuck in traffic around",
            "picking up passengers outside",
        ],
        (40, 40, 160),
    ),
}
_PLACES = {
    "beach": ("the sandy beach", (235, 215, 160)),
    "park": ("a green city park", (90, 160, 80)),
    "snow": ("a snowy mountain town", (240, 240, 250)),
    "city": ("a busy downtown area", (120, 120, 130)),
    "home": ("a cozy family home", (180, 140, 110)),
    "night": ("the quiet evening streets", (25, 25, 60)),
}
_EXTRAS = [
    "on a bright sunny afternoon",
    "while several people watch nearby",
    "under a cloudy gray sky",
    "early in the foggy morning",
    "during a warm summer evening",
    "next to some tall leafy trees",
    "as the sun slowly sets",
    "with colorful buildings behind",
]


def _caption(rng: random.Random, scene: str, place: str) -> str:
    subjects, actions, _ = _SCENES[scene]
    text = f"{rng.choice(subjects)} {rng.choice(actions)} {_PLACES[place][0]} {rng.choice(_EXTRAS)}"
    if rng.random() < 0.1:  # a few short captions, as in COCO
        text = f"{rng.choice(subjects)} {rng.choice(actions)} {_PLACES[place][0]}"
    return text[0].upper() + text[1:] + "."


def _image(rng: random.Random, scene: str, place: str) -> Image.Image:
    background = tuple(min(255, max(0, c + rng.randint(-20, 20))) for c in _PLACES[place][1])
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), background)
    draw = ImageDraw.Draw(image)
    colour = tuple(min(255, max(0, c + rng.randint(-25, 25))) for c in _SCENES[scene][2])
    for _ in range(rng.randint(1, 3)):
        x, y = rng.randint(0, IMAGE_SIZE - 30), rng.randint(0, IMAGE_SIZE - 30)
        w, h = rng.randint(15, 40), rng.randint(15, 40)
        shape = draw.ellipse if scene in {"dog", "giraffe", "pizza"} else draw.rectangle
        shape((x, y, x + w, y + h), fill=colour)
    return image


def ensure_sample(captions_path: Path, image_dir: Path, seed: int = 0) -> None:
    """Write the sample (COCO JSON + JPEGs) unless it is already complete; idempotent and deterministic."""
    if captions_path.is_file() and image_dir.is_dir() and len(list(image_dir.glob("*.jpg"))) == N_IMAGES:
        return
    rng = random.Random(seed)
    image_dir.mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    scenes, places = sorted(_SCENES), sorted(_PLACES)
    for index in range(N_IMAGES):
        image_id = 1000 + index * 7  # sparse ids, as in COCO
        scene, place = scenes[index % len(scenes)], rng.choice(places)
        file_name = f"sample_{image_id:08d}.jpg"
        _image(rng, scene, place).save(image_dir / file_name, quality=90)
        images.append({"id": image_id, "file_name": file_name, "width": IMAGE_SIZE, "height": IMAGE_SIZE})
        for n in range(CAPTIONS_PER_IMAGE):
            annotations.append(
                {"id": 50_000 + index * 10 + n, "image_id": image_id, "caption": _caption(rng, scene, place)}
            )
    document = {"info": {"description": "csts-pipeline embedded sample"}, "images": images, "annotations": annotations}
    blob = json.dumps(document).encode()
    write_atomic(captions_path, lambda handle: handle.write(blob))
