"""CryoViT: the types of a tomogram-segmentation model and the path that fills them through vitrio."""
