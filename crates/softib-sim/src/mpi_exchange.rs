//! The window-boundary exchange of a partitioned run over MPI (feature `mpi`): one rank per
//! partition, what crossed a cut cable swapped with one `MPI_Alltoallv` and the next window's
//! start agreed with one `MPI_Allreduce` (min), as `softib_fabric::parallel::run_distributed`
//! asks. Run under `mpirun -np N`; rank r runs partition r.

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;
use softib_fabric::parallel::Exchange;
use softib_fabric::time::Picos;

/// MPI for the life of a run: the initialised library (finalised when dropped) and the
/// exchange among the ranks of the world.
pub struct MpiSession {
    /// The exchange among all ranks. Declared first, so dropped first: its communicator
    /// must be freed before MPI is finalised.
    pub exchange: MpiExchange,
    /// Keeps MPI initialised; `MPI_Finalize` runs when it is dropped.
    _universe: mpi::environment::Universe,
}

impl MpiSession {
    /// Initialises MPI (once per process), or `None` if it already was.
    pub fn init() -> Option<MpiSession> {
        let universe = mpi::initialize()?;
        let exchange = MpiExchange::new(universe.world().duplicate());
        Some(MpiSession {
            exchange,
            _universe: universe,
        })
    }
}

/// Whether this process was started by an MPI launcher (`mpirun`, `srun`): the variables
/// Open MPI, MPICH/Hydra and PMIx set for every rank.
pub fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// [`Exchange`] over an MPI communicator (normally the world).
pub struct MpiExchange {
    world: SimpleCommunicator,
}

impl MpiExchange {
    /// The exchange among the ranks of `world`.
    pub fn new(world: SimpleCommunicator) -> Self {
        MpiExchange { world }
    }

    /// This rank (the partition it runs).
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// Number of ranks (partitions).
    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// The sum of `v` over all ranks (every rank gets it).
    pub fn sum(&self, v: u64) -> u64 {
        let mut total = 0u64;
        self.world
            .all_reduce_into(&v, &mut total, SystemOperation::sum());
        total
    }

    /// Every rank's `v`, in rank order (every rank gets them).
    pub fn gather_to_all(&self, v: u64) -> Vec<u64> {
        let mut all = vec![0u64; self.size()];
        self.world.all_gather_into(&v, &mut all[..]);
        all
    }
}

fn displacements(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

impl Exchange for MpiExchange {
    fn all_to_all(&mut self, outgoing: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let n = self.size();
        assert_eq!(outgoing.len(), n, "one buffer per rank");
        let send_counts: Vec<Count> = outgoing
            .iter()
            .map(|b| Count::try_from(b.len()).expect("a window's exchange fits an MPI count"))
            .collect();
        let mut recv_counts = vec![0 as Count; n];
        self.world
            .all_to_all_into(&send_counts[..], &mut recv_counts[..]);
        // One spare byte each, not counted: two empty vectors share the same dangling
        // pointer, and Open MPI refuses a send buffer equal to the receive buffer.
        let mut send: Vec<u8> = outgoing.concat();
        send.push(0);
        let send_displs = displacements(&send_counts);
        let recv_displs = displacements(&recv_counts);
        let total: usize = recv_counts.iter().map(|&c| c as usize).sum();
        let mut recv = vec![0u8; total + 1];
        {
            let sp = Partition::new(&send[..], &send_counts[..], &send_displs[..]);
            let mut rp = PartitionMut::new(&mut recv[..], &recv_counts[..], &recv_displs[..]);
            self.world.all_to_all_varcount_into(&sp, &mut rp);
        }
        (0..n)
            .map(|i| {
                let (d, c) = (recv_displs[i] as usize, recv_counts[i] as usize);
                recv[d..d + c].to_vec()
            })
            .collect()
    }

    fn min_over_partitions(&mut self, t: Picos) -> Picos {
        let mut m: Picos = 0;
        self.world
            .all_reduce_into(&t, &mut m, SystemOperation::min());
        m
    }
}
