"""paperlib.harness.vocabulary: names shared by the runner, the records and the pages."""

from paperlib.harness import vocabulary


def test_short_numbers_write_exponents_without_a_plus():
    assert [vocabulary.short_number(x) for x in (1.0, 0.33, 1e4, 1e6, 1e7, 2e-5)] == \
        ["1", "0.33", "10000", "1e6", "1e7", "2e-05"]


def test_model_names_are_the_listed_ones_and_any_wide_resnet():
    assert vocabulary.is_model_name("lenet5") and vocabulary.is_model_name("wrn-16-1")
    assert not vocabulary.is_model_name("wrn-16") and not vocabulary.is_model_name("vgg16")
