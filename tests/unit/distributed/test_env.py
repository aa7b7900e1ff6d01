from cpuft.distributed.env import RankInfo, rank_info


def test_torchrun_openmpi_intelmpi_and_single():
    assert rank_info({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                      "LOCAL_WORLD_SIZE": "2"}) == RankInfo(3, 4, 1, 2, "torchrun")
    assert rank_info({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                      "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
                     ) == RankInfo(2, 4, 0, 2, "openmpi")
    # A launcher that does not say how many ranks share the node: the whole world.
    assert rank_info({"PMI_RANK": "1", "PMI_SIZE": "2"}) == RankInfo(1, 2, 0, 2, "hydra")
    assert rank_info({}) == RankInfo(0, 1, 0, 1, "") and not rank_info({}).distributed
