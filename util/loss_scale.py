"""float16 dynamic loss scaling, shared by the pre-training and fine-tuning trainers.

The loss is multiplied by `scale` before the backward pass and the gradients divided by it, so
small float16 gradients do not underflow. A step with non-finite gradients is skipped and the
scale halved (not below 1); after GROWTH_STEPS finite steps in a row it doubles. bfloat16 has
float32's range and needs none. Both variables are part of a run's checkpoint state.
"""
import tensorflow as tf

INITIAL_SCALE = 2.0 ** 15
GROWTH_STEPS = 2000


class DynamicLossScale:
    """`<prefix>loss_scale` (float32) and `<prefix>loss_scale_good_steps` (int64) variables."""

    def __init__(self, prefix: str, initial: float = INITIAL_SCALE):
        self.initial = initial
        agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
        with tf.name_scope(""):
            self.scale = tf.Variable(initial, trainable=False, dtype=tf.float32,
                                     name=prefix + "loss_scale", aggregation=agg)
            self.good_steps = tf.Variable(tf.constant(0, tf.int64), trainable=False,
                                          name=prefix + "loss_scale_good_steps",
                                          aggregation=agg)

    @property
    def variables(self) -> list[tf.Variable]:
        return [self.scale, self.good_steps]

    def reset(self) -> None:
        """The state of a new run."""
        self.scale.assign(self.initial)
        self.good_steps.assign(0)

    def update(self, finite: tf.Tensor) -> None:
        """After a step: halve on non-finite gradients, double after GROWTH_STEPS finite ones."""
        grow = tf.logical_and(finite, self.good_steps + 1 >= GROWTH_STEPS)
        self.scale.assign(tf.where(grow, self.scale * 2.0, tf.where(
            finite, self.scale, tf.maximum(self.scale / 2.0, 1.0))))
        self.good_steps.assign(tf.where(finite & ~grow, self.good_steps + 1,
                                        tf.constant(0, tf.int64)))
